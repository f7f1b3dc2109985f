# MEMFIT_SANITIZE=address -> ASan + UBSan; MEMFIT_SANITIZE=thread -> TSan. Applied to every target.
# -g1: line tables are all a sanitizer report needs (file:line per frame), at a fraction of -g's build time.
# MEMFIT_SANITIZER_ADDRESS/_THREAD tell the code which runtime took malloc over (whatever the compiler).
if(MEMFIT_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(MEMFIT_SANITIZER_ADDRESS=1)
elseif(MEMFIT_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=thread)
  add_compile_definitions(MEMFIT_SANITIZER_THREAD=1)
elseif(NOT MEMFIT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "MEMFIT_SANITIZE must be '', 'address' or 'thread', not '${MEMFIT_SANITIZE}'")
endif()
