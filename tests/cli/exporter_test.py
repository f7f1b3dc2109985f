#!/usr/bin/env python3
"""`memfit exporter` against real clients: the binary serves /metrics on loopback, Debian's promtool checks
the text, a real Prometheus server scrapes it, share-group members (share_member_process on a simulated
80 GiB device) appear in it and leave it when killed, and a soak watches the exporter's memory.

    exporter_test.py MEMFIT SHARE_MEMBER CHECK [SANITIZER]

CHECK is one of: docs, serve, hostile_clients, promtool, prometheus, share_group, many_members, soak. A check whose tool is not
installed exits 77 (ctest: skipped) after saying which tool and how to install it.
"""
import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MEMFIT, MEMBER, CHECK = sys.argv[1], sys.argv[2], sys.argv[3]
SANITIZER = sys.argv[4] if len(sys.argv) > 4 else ""
SKIP = 77


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def skip(message):
    print("SKIPPED:", message)
    sys.exit(SKIP)


STARTED = []  # every exporter this check started, killed at exit: a failed check leaves no server behind


@atexit.register
def kill_started_exporters():
    for proc in STARTED:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Exporter:
    def __init__(self, *args):
        self.proc = subprocess.Popen([MEMFIT, "exporter", "--no-gpu", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        STARTED.append(self.proc)
        line = self.proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        if not m:
            self.proc.kill()
            fail(f"the exporter did not say where it serves: {line!r} {self.proc.stderr.read()!r}")
        self.port = int(m.group(1))

    def scrape(self):
        start = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            body = r.read().decode()
            kind = r.headers.get("Content-Type", "")
        return body, kind, time.monotonic() - start

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("the exporter did not stop on SIGTERM within 30 s")
        return rc, self.proc.stderr.read()


def samples(body, name):
    """{labels dict as a sorted tuple: value} for one metric name."""
    out = {}
    for line in body.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head)))
        out[labels] = float(value)
    return out


class Member:
    def __init__(self, group):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFIT_", "XLA_", "TF_"))}
        env.update(MEMFIT_SHARE=group, MEMFIT_SIMULATED_BYTES="80GiB", XLA_PYTHON_CLIENT_PREALLOCATE="false",
                   XLA_CLIENT_MEM_FRACTION="1.0")
        self.proc = subprocess.Popen([MEMBER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def kill9(self):
        self.proc.kill()
        self.proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_serve():
    e = Exporter("--listen", "127.0.0.1:0", "--interval", "200ms")
    body, kind, _ = e.scrape()
    if kind != "text/plain; version=0.0.4; charset=utf-8":
        fail(f"Content-Type {kind!r}")
    for family in ("memfit_up", "memfit_host_memory_total_bytes", "memfit_host_memory_available_bytes",
                   "memfit_host_memory_pressure_ratio"):
        if f"# HELP {family} " not in body or f"# TYPE {family} gauge" not in body:
            fail(f"{family} has no HELP/TYPE lines:\n{body}")
    if samples(body, "memfit_up") != {(): 1.0}:
        fail("memfit_up is not 1")
    if (("window", "10s"),) not in samples(body, "memfit_host_memory_pressure_ratio") and \
            os.path.exists("/proc/pressure/memory"):
        fail("no memory pressure with window 10s")
    # The port is taken: a second exporter is refused, exit 2, one line.
    second = subprocess.run([MEMFIT, "exporter", "--no-gpu", "--listen", f"127.0.0.1:{e.port}"],
                            capture_output=True, text=True, timeout=30)
    if second.returncode != 2 or not second.stderr.startswith("memfit: cannot listen on") or second.stdout:
        fail(f"a second exporter on a port in use: rc {second.returncode}, {second.stderr!r}")
    for bad in (["--listen", "nonsense"], ["--interval", "0s"], ["--interval", "soon"]):
        r = subprocess.run([MEMFIT, "exporter", "--no-gpu", *bad], capture_output=True, text=True, timeout=30)
        if r.returncode != 2 or not r.stderr.startswith("memfit: "):
            fail(f"{bad}: rc {r.returncode}, {r.stderr!r}")
    rc, err = e.stop()
    if rc != 0:
        fail(f"SIGTERM: exit {rc} {err}")
    print("serve: /metrics answered with the 0.0.4 content type; a busy port and bad options exit 2")


def check_hostile_clients():
    """Clients that connect and never finish a request - idle keep-alive sockets, a port scanner, a slowloris
    trickling a header - each hold one of the server's workers until it gives up on them: a scrape beside 100
    of them is answered at once. A request body (a scrape has none) is refused with 413. The exporter then
    serves as before and stops cleanly."""
    e = Exporter("--listen", "127.0.0.1:0", "--interval", "200ms")
    held = []
    try:
        for _ in range(96):
            held.append(socket.create_connection(("127.0.0.1", e.port)))
        for _ in range(4):  # a request begun and never ended
            s = socket.create_connection(("127.0.0.1", e.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: a")
            held.append(s)
        times = []
        for _ in range(5):
            try:
                body, _, took = e.scrape()
            except OSError as error:
                fail(f"/metrics beside 100 clients that send nothing: no answer within 10 s ({error})")
            if "memfit_up 1" not in body:
                fail("a scrape beside 100 idle clients had no memfit_up")
            times.append(took)
        limit = 1.0 if not SANITIZER else 3.0
        if max(times) > limit:
            fail(f"/metrics beside 100 clients that send nothing: slowest of 5 scrapes {max(times):.2f} s "
                 f"(limit {limit:.0f} s; Prometheus gives up after its scrape_timeout, 10 s by default)")
        # A request with a body (a scrape has none): refused with 413, where httplib's default limit, none,
        # read all of it first and answered 404.
        body_bytes = 256 * 2**20
        with socket.create_connection(("127.0.0.1", e.port), timeout=30) as s:
            s.sendall(f"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {body_bytes}\r\n\r\n".encode())
            chunk = b"x" * 2**20
            for _ in range(body_bytes // len(chunk)):
                s.sendall(chunk)
            answer = s.recv(100)
        if not answer.startswith(b"HTTP/1.1 413"):
            fail(f"a 256 MiB request body: {answer[:40]!r} (want 413 Payload Too Large)")
    finally:
        for s in held:
            s.close()
    body, _, took = e.scrape()
    if "memfit_up 1" not in body:
        fail("no memfit_up after the hostile clients left")
    rc, err = e.stop()
    if rc != 0:
        fail(f"SIGTERM after hostile clients: exit {rc} {err[-2000:]}")
    print(f"hostile_clients: 5 scrapes beside 100 silent clients, slowest {max(times) * 1000:.1f} ms; "
          "a 256 MiB body refused with 413; clean exit")


def check_promtool():
    promtool = shutil.which("promtool")
    if not promtool:
        skip("promtool is not installed (Debian: apt-get install prometheus)")
    e = Exporter("--listen", "127.0.0.1:0")
    body, _, _ = e.scrape()
    e.stop()
    once = subprocess.run([MEMFIT, "exporter", "--no-gpu", "--once"], capture_output=True, text=True, timeout=60)
    for text, what in ((body, "/metrics"), (once.stdout, "--once")):
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"promtool check metrics on {what}: {r.stdout}{r.stderr}\n{text}")
    print(f"promtool check metrics: passed on {len(body.splitlines())} lines")


def check_prometheus():
    prometheus = shutil.which("prometheus")
    if not prometheus:
        skip("the prometheus server is not installed (Debian: apt-get install prometheus)")
    e = Exporter("--listen", "127.0.0.1:0", "--interval", "500ms")
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: memfit\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{e.port}']\n")
        port = free_port()
        server = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                                   f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            answer = None
            while time.monotonic() < deadline:
                try:
                    url = f"http://127.0.0.1:{port}/api/v1/query?query=memfit_host_memory_available_bytes"
                    with urllib.request.urlopen(url, timeout=5) as r:
                        answer = json.load(r)
                    if answer["data"]["result"]:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            if not answer or not answer["data"]["result"]:
                fail(f"Prometheus never had memfit_host_memory_available_bytes: {answer}")
            value = float(answer["data"]["result"][0]["value"][1])
            with open("/proc/meminfo") as f:
                total = int(next(l for l in f if l.startswith("MemTotal:")).split()[1]) * 1024
            if not 0 < value <= total:
                fail(f"available {value} of {total}")
            print(f"prometheus: scraped the exporter, query answered {value:.0f} B available")
        finally:
            server.terminate()
            server.wait(timeout=30)
            e.stop()


def wait_for(exporter, predicate, seconds):
    deadline = time.monotonic() + seconds
    body = ""
    while time.monotonic() < deadline:
        body, _, _ = exporter.scrape()
        if predicate(body):
            return body, True
        time.sleep(0.02)
    return body, False


def pids_of(body, name, group):
    return {dict(k)["pid"]: v for k, v in samples(body, name).items() if dict(k).get("group") == group}


def end_group(exporter, members, group):
    """Kills the members, stops the exporter and removes the group's table."""
    for m in members:
        m.kill9()
    exporter.stop()
    subprocess.run(["rm", "-f", f"/dev/shm/memfit-share-{group}-dev0"])


def check_share_group():
    group = f"exporter-{os.getpid()}"
    interval = 0.5
    e = Exporter("--listen", "127.0.0.1:0", "--interval", f"{int(interval * 1000)}ms")
    members = [Member(group) for _ in range(3)]
    try:
        for i, m in enumerate(members):
            for _ in range(i + 1):
                if not m.ask("alloc 5GiB").startswith("ok"):
                    fail("a member could not allocate 5 GiB")
        want = {str(m.proc.pid): (i + 1) * 5 * 2**30 for i, m in enumerate(members)}
        body, ok = wait_for(e, lambda b: pids_of(b, "memfit_pool_bytes_in_use", group) == want, 10)
        if not ok:
            fail(f"in use per member: {pids_of(body, 'memfit_pool_bytes_in_use', group)}, want {want}")
        for name in ("memfit_pool_pool_bytes", "memfit_pool_lease_bytes", "memfit_pool_peak_bytes_in_use"):
            got = pids_of(body, name, group)
            if set(got) != set(want) or any(got[p] < want[p] for p in want):
                fail(f"{name}: {got}")
        victim = members.pop(0)
        gone = str(victim.proc.pid)
        killed = time.monotonic()
        victim.kill9()
        body, ok = wait_for(e, lambda b: gone not in pids_of(b, "memfit_pool_lease_bytes", group), 10)
        took = time.monotonic() - killed
        if not ok:
            fail(f"a killed member still listed: {pids_of(body, 'memfit_pool_lease_bytes', group)}")
        if took > 2 * interval:
            fail(f"the killed member left the metrics after {took:.2f} s, more than 2 intervals ({2 * interval} s)")
        print(f"share_group: 3 members' pools shown; the kill -9'd one gone after {took:.2f} s")
    finally:
        end_group(e, members, group)


def check_many_members():
    group = f"many-{os.getpid()}"
    e = Exporter("--listen", "127.0.0.1:0", "--interval", "500ms")
    members = [Member(group) for _ in range(64)]
    try:
        # 64 members' agents share one lock; when each reaped the whole table ten times a second (64 x 64
        # /proc reads), these allocations took 35 s under ASan.
        start = time.monotonic()
        for m in members:
            if not m.ask("alloc 1GiB").startswith("ok"):
                fail("a member could not allocate 1 GiB")
        took, allowed = time.monotonic() - start, (15.0 if SANITIZER else 5.0)
        if took > allowed:
            fail(f"64 members took {took:.1f} s to allocate 1 GiB each (allowed {allowed:.0f} s)")
        body, ok = wait_for(e, lambda b: len(pids_of(b, "memfit_pool_bytes_in_use", group)) == 64, 20)
        if not ok:
            fail(f"{len(pids_of(body, 'memfit_pool_bytes_in_use', group))} of 64 members listed")
        times = sorted(e.scrape()[2] for _ in range(50))
        limit = 0.05 if not SANITIZER else 0.2
        if times[-1] >= limit:
            fail(f"/metrics with 64 members: slowest of 50 scrapes {times[-1] * 1000:.1f} ms (limit {limit * 1000:.0f})")
        print(f"many_members: 64 members allocated in {took:.2f} s and listed; 50 scrapes, median {times[25] * 1000:.2f} ms, "
              f"slowest {times[-1] * 1000:.2f} ms (limit {limit * 1000:.0f} ms)")
    finally:
        end_group(e, members, group)


def check_soak():
    e = Exporter("--listen", "127.0.0.1:0", "--interval", "100ms")
    # 1000 scrapes over 60 s (the target); under a sanitizer, over 20 s - there it checks crashes and leaks at
    # exit, not the RSS.
    scrapes, seconds = 1000, (20.0 if SANITIZER else 60.0)
    start = time.monotonic()
    rss_after_warmup = 0
    for i in range(scrapes):
        body, _, _ = e.scrape()
        if "memfit_up 1" not in body:
            fail(f"scrape {i}: no memfit_up")
        if i == 100:
            rss_after_warmup = e.rss_bytes()
        time.sleep(max(0.0, start + (i + 1) * seconds / scrapes - time.monotonic()))
    rss_end = e.rss_bytes()
    rc, err = e.stop()
    if rc != 0:
        fail(f"the exporter exited {rc} after the soak (a sanitizer report?): {err[-3000:]}")
    growth = rss_end - rss_after_warmup
    if SANITIZER:
        # ASan keeps freed memory in quarantine, so RSS is not a leak signal there; LeakSanitizer checked the
        # exit above instead.
        print(f"soak: {scrapes} scrapes in {time.monotonic() - start:.0f} s, no crash, clean exit under "
              f"{SANITIZER} (RSS {rss_after_warmup} -> {rss_end}, not judged under a sanitizer)")
        return
    if growth > 4 * 2**20:
        fail(f"RSS grew {growth} B over {scrapes - 100} scrapes ({rss_after_warmup} -> {rss_end})")
    print(f"soak: {scrapes} scrapes in {time.monotonic() - start:.0f} s, RSS {rss_after_warmup} -> {rss_end} "
          f"({growth:+d} B), clean exit")


def check_docs():
    """docs/: the Grafana dashboard is JSON whose queries name only metrics the exporter makes, and the scrape
    config is one Prometheus accepts (promtool check config, when installed)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    made = set(re.findall(r'family\("(memfit_\w+)"', open(os.path.join(root, "src/report/prometheus.cc")).read()))
    dash = json.load(open(os.path.join(root, "docs/grafana-dashboard.json")))
    used = set()
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            used |= set(re.findall(r"memfit_\w+", target["expr"]))
    if not used or used - made:
        fail(f"the dashboard queries metrics the exporter does not make: {sorted(used - made)}")
    promtool = shutil.which("promtool")
    if not promtool:
        skip("promtool is not installed (Debian: apt-get install prometheus); the dashboard was checked")
    r = subprocess.run([promtool, "check", "config", os.path.join(root, "docs/prometheus-scrape.yml")],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"promtool check config docs/prometheus-scrape.yml: {r.stdout}{r.stderr}")
    print(f"docs: the dashboard's {len(used)} metrics are all made by the exporter; the scrape config passes promtool")


{"docs": check_docs, "serve": check_serve, "hostile_clients": check_hostile_clients, "promtool": check_promtool, "prometheus": check_prometheus,
 "share_group": check_share_group, "many_members": check_many_members, "soak": check_soak}[CHECK]()
