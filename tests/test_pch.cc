// The precompiled header's own translation unit (tests/CMakeLists.txt): the test binaries reuse its header.
int main() { return 0; }
