"""memfit_jax on the GPU (issue #21): check() on a GPT step - memfit's prediction from the lowered program beside
XLA's memory_analysis() of the compiled one - capture() of the same step, and the device memory profile of a
process holding one 10 GiB array read back by `memfit profile`.

    PYTHONPATH=build/gpu/python python3 gpu/jax_check.py build/gpu/tools/memfit/memfit OUTDIR

Prints one JSON line per check.
"""
import json
import subprocess
import sys

import jax
import jax.numpy as jnp

import memfit_jax

cli, out = sys.argv[1], sys.argv[2]


def gpt_step():
    d, layers, seq, batch, vocab = 1024, 8, 1024, 8, 32000
    k = jax.random.PRNGKey(0)
    params = {"embed": jax.ShapeDtypeStruct((vocab, d), jnp.float32),
              "w": [jax.ShapeDtypeStruct((d, 4 * d), jnp.float32) for _ in range(layers)],
              "v": [jax.ShapeDtypeStruct((4 * d, d), jnp.float32) for _ in range(layers)]}
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32)

    def loss(p, t):
        x = p["embed"][t]
        for w, v in zip(p["w"], p["v"]):
            x = x + jax.nn.gelu(x @ w) @ v
        logits = x @ p["embed"].T
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    def step(p, t):
        g = jax.grad(loss)(p, t)
        return jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b, p, g)

    return step, params, tokens, k


step, params, tokens, _ = gpt_step()
report = memfit_jax.check(step, params, tokens, capacity="h200", donate_argnums=(0,))
print(json.dumps({"check": {"predicted_peak": report["prediction"]["peak_bytes"],
                            "xla": report.get("xla"), "error": report.get("error"), "fits": report.get("fits")}}))

written = memfit_jax.capture(out + "/capture", step, params, tokens, donate_argnums=(0,))
hlo = json.loads(subprocess.run([cli, "hlo", out + "/capture", "--json"], capture_output=True, text=True).stdout)
doctor = subprocess.run([cli, "doctor", "--bundle", out + "/capture", "--json"], capture_output=True, text=True)
print(json.dumps({"capture": written, "hlo_temp": hlo.get("temp_bytes"), "doctor_rc": doctor.returncode}))

big = jnp.ones((10 * 2**30 // 4,), jnp.float32)
big.block_until_ready()
with open(out + "/ten_gib.prof", "wb") as f:
    f.write(jax.profiler.device_memory_profile())
prof = json.loads(subprocess.run([cli, "profile", out + "/ten_gib.prof", "--json"], capture_output=True,
                                 text=True).stdout)
print(json.dumps({"profile_devices": prof["devices"], "expected_buffer_bytes": 10 * 2**30}))
