"""The web app (``tether serve``) next to a plain uvicorn app with no framework (``bench/hello.py``),
both started here, measured interleaved:

- time to first byte of the page on a warm server;
- first contentful paint in Debian's Chromium (Playwright);
- events per second delivered over SSE to 50 concurrent subscribers (ours: events committed to the log
  by another process; the floor: events broadcast from memory);
- a worker's progress write → the event at a subscriber, p50/p95, with 50 pages open (target p95 ≤ 250 ms);
- a conversation turn with 50 pages open vs none (open pages must not slow the agent down).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import goals
from bench.paired import Cpu, Pair, paired, row

ROOT = Path(__file__).resolve().parent.parent
PAGES = 50
EVENTS = 1000
ROUNDS_WITH_PAGES = 6
AUTH: dict[str, str] = {}  # tether serve's token, as a bearer (the plain app ignores it)
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]  # fmt: skip


class Server:
    def __init__(self, command: list[str], env: dict[str, str], port: int | None = None) -> None:
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            start_new_session=True, env={**os.environ, **env},
        )  # fmt: skip
        self.port = port or self._announced()
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.base + "/", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _announced(self) -> int:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/(?:\?token=(\S+))?", line)
            if found:
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # keep the pipe drained
                if found.group(2):  # tether serve asks for its token on loopback too
                    AUTH["Authorization"] = f"Bearer {found.group(2)}"
                return int(found.group(1))
        raise RuntimeError("the server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def web(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    env = {"TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0"}
    ours = Server(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", "bench.registry:registry", "serve",
         "--port", "0", "--max-streams", "200"], env,
    )  # fmt: skip
    floor_port = _free_port()
    floor = Server(
        [sys.executable, "-m", "uvicorn", "bench.hello:app", "--port", str(floor_port),
         "--log-level", "warning"],
        {}, floor_port,
    )  # fmt: skip
    try:
        print("\nweb app (tether serve) next to a plain uvicorn app, both warm")
        # Each side counts this process and its own server's tree; the other server is left out.
        servers = (
            Cpu("this process + tether serve's tree (psutil)", roots=lambda: [ours.proc.pid]),
            Cpu("this process + uvicorn's tree (psutil)", roots=lambda: [floor.proc.pid]),
        )
        _first_byte(ours, floor, servers)
        _first_paint(ours, floor)
        _sse_throughput(ours, floor, home)
        _progress_latency(ours, home, servers[0])
        _turns_with_pages(ours, servers[0])
        _idle_memory(ours)
    finally:
        ours.stop()
        floor.stop()


def _first_byte(ours: Server, floor: Server, cpu: tuple[Cpu, Cpu]) -> None:
    with httpx.Client(base_url=ours.base) as mine, httpx.Client(base_url=floor.base) as plain:

        def first_byte(client: httpx.Client) -> Callable[[], float]:
            def fetch() -> float:
                start = time.perf_counter()
                with client.stream("GET", "/") as response:
                    chunks = response.iter_raw()
                    next(chunks)
                    elapsed = time.perf_counter() - start
                    for _ in chunks:
                        pass
                return elapsed

            return fetch

        # One request at a time: the light load the goal is stated for.
        row("time to first byte of the page", paired(first_byte(mine), first_byte(plain), 200, cpu=cpu),
            "a plain uvicorn 'hello' page, one request at a time", goals.FIRST_BYTE)  # fmt: skip


def _first_paint(ours: Server, floor: Server) -> None:
    executable = shutil.which("chromium")
    if executable is None:
        print("  first paint: skipped (Debian's chromium is not installed; .ci/run installs it)")
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:

            def paint(url: str) -> Callable[[], float]:
                def load() -> float:
                    page = browser.new_page(extra_http_headers=AUTH)
                    try:
                        page.goto(url, wait_until="load")
                        fcp = page.evaluate(
                            "() => new Promise(done => { const seen = () => { const e = performance"
                            ".getEntriesByName('first-contentful-paint')[0]; if (e) done(e.startTime); "
                            "else setTimeout(seen, 5); }; seen(); })"
                        )
                    finally:
                        page.close()
                    return float(fcp) / 1000

                return load

            # The browser (under Playwright's driver, a child of this process) counts on both sides.
            cpu = (
                Cpu.tree("this process + browser + tether serve (psutil)", exclude=lambda: [floor.proc.pid]),
                Cpu.tree("this process + browser + uvicorn (psutil)", exclude=lambda: [ours.proc.pid]),
            )
            pair = paired(paint(ours.base + "/"), paint(floor.base + "/"), 15, cpu=cpu)
            row("first contentful paint (Chromium)", pair, "a plain uvicorn 'hello' page")
        finally:
            browser.close()


async def _subscribe(url: str, count: int, ready: asyncio.Event, wanted: int, got: list[int]) -> None:
    async with httpx.AsyncClient(timeout=None, headers=AUTH) as client:

        async def one(index: int) -> None:
            async with client.stream("GET", url) as response:
                got[index] = 0
                if all(n >= 0 for n in got):
                    ready.set()
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        got[index] += 1
                        if got[index] >= wanted:
                            return

        await asyncio.gather(*(one(i) for i in range(count)))


def _deliver(url: str, emit: Callable[[], None]) -> float:
    """Seconds from the first emitted event until each of the subscribers holds all ``EVENTS``."""

    async def run() -> float:
        ready = asyncio.Event()
        got = [-1] * PAGES
        listening = asyncio.create_task(_subscribe(url, PAGES, ready, EVENTS, got))
        await asyncio.wait_for(ready.wait(), 30)
        await asyncio.sleep(0.2)  # every stream has passed its catch-up
        start = time.perf_counter()
        await asyncio.to_thread(emit)
        await asyncio.wait_for(listening, 120)
        return time.perf_counter() - start

    return asyncio.run(run())


def _sse_throughput(ours: Server, floor: Server, home: Path) -> None:
    from tether.events import ToolProgress
    from tether.runtime import Runtime

    runtime = Runtime.open(home)

    def append() -> None:
        for n in range(EVENTS):
            runtime.events.append(
                ToolProgress(topic="job:bench", execution_id="bench", fraction=None, message=str(n))
            )

    def emit_floor() -> None:
        httpx.post(f"{floor.base}/emit?{EVENTS}")

    cpu = (
        Cpu("this process + tether serve's tree (psutil)", roots=lambda: [ours.proc.pid]),
        Cpu("this process + uvicorn's tree (psutil)", roots=lambda: [floor.proc.pid]),
    )
    try:
        pair = paired(
            lambda: _deliver(f"{ours.base}/api/events", append),
            lambda: _deliver(f"{floor.base}/events", emit_floor),
            3,
            warmup=1,
            cpu=cpu,
        )
    finally:
        runtime.close()
    delivered = PAGES * EVENTS
    print(
        f"  SSE to {PAGES} subscribers, {EVENTS} events each: "
        f"ours {delivered / pair.ours_ms * 1000:,.0f} events/s "
        f"(committed one by one by another process), plain uvicorn from memory "
        f"{delivered / pair.floor_ms * 1000:,.0f} events/s; ratio of times {pair.ratio:.2f}x;"
        f" CPU {pair.ours_cpu_ms:,.0f} / {pair.floor_cpu_ms:,.0f} ms = {pair.cpu_ratio:.2f}x (no goal)"
    )
    print(f"  {'':<44} paired with: plain uvicorn broadcasting from memory; CPU of {pair.cpu_label}")


def _progress_latency(ours: Server, home: Path, cpu: Cpu) -> None:
    """A background job reports progress every 50 ms with the time of the report; 50 pages follow."""
    from bench.registry import registry
    from tether.execution.executor import Executor

    latencies: list[float] = []

    async def run() -> None:
        ready = asyncio.Event()
        got = [-1] * (PAGES - 1)
        idle = asyncio.create_task(_subscribe(f"{ours.base}/api/events", PAGES - 1, ready, 10**9, got))
        await asyncio.wait_for(ready.wait(), 30)
        with Executor(registry, home=home) as executor:
            job = await executor.execute("b.ticker", caller="cli", detach=True)
            try:
                async with httpx.AsyncClient(timeout=None, headers=AUTH) as client:
                    params = {"topic": f"job:{job.execution_id}"}
                    async with client.stream("GET", f"{ours.base}/api/events", params=params) as response:
                        async for line in response.aiter_lines():
                            found = re.search(r'"message":"([0-9.]+)"', line)
                            if found:
                                latencies.append(time.time() - float(found.group(1)))
                                if len(latencies) >= 200:
                                    break
            finally:
                await executor.control(job.execution_id, "stop", caller="cli")
        idle.cancel()

    # The executor here runs the ticker's worker: this process's tree counts it, tether serve's too.
    meter = Cpu.tree(cpu.label.replace("this process", "this process tree"), roots=cpu.roots)
    cpu_start = meter.sample(before=True)
    wall_start = time.perf_counter()
    asyncio.run(run())
    cpu_s = meter.sample(before=False) - cpu_start
    wall_s = time.perf_counter() - wall_start
    steady = sorted(latencies[10:])  # the first reports wait for the relay to list the new job
    p50 = statistics.median(steady) * 1000
    p95 = steady[int(len(steady) * 0.95) - 1] * 1000
    verdict = "met" if p95 <= goals.PROGRESS_P95_MS else "not met"
    print(
        f"  progress write → event at a subscriber ({PAGES} pages open): p50 {p50:.0f} ms, p95 {p95:.0f} ms "
        f"(issue 7's goal p95 ≤ {goals.PROGRESS_P95_MS:g} ms: {verdict});"
        f" CPU {cpu_s / wall_s * 100:.0f}% of a core over {wall_s:.1f} s"
    )
    print(f"  {'':<44} paired with: nothing (an absolute target); CPU of {meter.label}")


def _turns_with_pages(ours: Server, cpu: Cpu) -> None:
    """A turn's time with 50 pages following every event vs none, in alternating rounds."""
    client = httpx.Client(base_url=ours.base, timeout=60, headers=AUTH)
    thread = client.post("/api/threads", json={}).json()["thread_id"]

    def turn() -> float:
        start = time.perf_counter()
        client.post(f"/api/threads/{thread}/messages", json={"text": "status"}).raise_for_status()
        while client.get(f"/api/threads/{thread}").json()["running"]:
            time.sleep(0.005)
        return time.perf_counter() - start

    loop = asyncio.new_event_loop()
    pages: list[Any] = []

    def open_pages() -> None:
        ready = asyncio.Event()
        got = [-1] * PAGES
        task = loop.create_task(_subscribe(f"{ours.base}/api/events", PAGES, ready, 10**9, got))
        loop.run_until_complete(asyncio.wait_for(ready.wait(), 30))
        pages.append(task)

    with_pages: list[float] = []
    without: list[float] = []
    ratios: list[float] = []
    cpus = [0.0, 0.0]  # with pages (their streams' CPU, here and in the server, included), without
    for _ in range(ROUNDS_WITH_PAGES):
        open_pages()
        worker = threading.Thread(target=loop.run_forever, daemon=True)
        worker.start()
        cpu_start = cpu.sample(before=True)
        loaded = statistics.median(turn() for _ in range(5))
        cpus[0] += cpu.sample(before=False) - cpu_start
        loop.call_soon_threadsafe(loop.stop)
        worker.join()
        pages.pop().cancel()
        loop.run_until_complete(asyncio.sleep(0.2))
        cpu_start = cpu.sample(before=True)
        bare = statistics.median(turn() for _ in range(5))
        cpus[1] += cpu.sample(before=False) - cpu_start
        with_pages.append(loaded)
        without.append(bare)
        ratios.append(loaded / bare)
    loop.close()
    client.close()
    turns = ROUNDS_WITH_PAGES * 5
    pair = Pair(
        ours_ms=statistics.median(with_pages) * 1000,
        floor_ms=statistics.median(without) * 1000,
        ratio=statistics.median(ratios),
        ours_cpu_ms=cpus[0] / turns * 1000,
        floor_cpu_ms=cpus[1] / turns * 1000,
        cpu_ratio=cpus[0] / cpus[1] if cpus[1] > 0 else float("inf"),
        cpu_label=cpu.label,
    )
    row(f"a turn with {PAGES} pages following", pair, "the same turn, no page open (issue 7's goal)",
        goals.TURN_WITH_PAGES)  # fmt: skip


IDLE_THREADS = 1000
IDLE_AGENTS = 10


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and its live children (tether serve: its fork server and workers)."""
    import psutil

    root = psutil.Process(pid)
    total = 0
    for proc in (root, *root.children(recursive=True)):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def _idle_memory(ours: Server) -> None:
    """What a long-running tether serve holds once 1,000 threads of 10 agents have each had a turn and
    gone idle (issue 22: sessions leave memory when idle). No floor: the figure is the growth."""
    client = httpx.Client(base_url=ours.base, timeout=60, headers=AUTH)
    for n in range(IDLE_AGENTS):
        client.post("/api/agents", json={"name": f"idle-{n}", "grants": ["automation"]})
    before = _tree_rss(ours.proc.pid)
    started = time.perf_counter()
    threads = []
    for i in range(IDLE_THREADS):
        thread = client.post("/api/threads", json={"agent": f"idle-{i % IDLE_AGENTS}"}).json()["thread_id"]
        client.post(f"/api/threads/{thread}/messages", json={"text": "status"}).raise_for_status()
        threads.append(thread)
        while client.get(f"/api/threads/{thread}").json()["running"]:
            time.sleep(0.005)
    took = time.perf_counter() - started
    after = _tree_rss(ours.proc.pid)
    time.sleep(5)  # idle
    idle = _tree_rss(ours.proc.pid)
    grown = (idle - before) / 2**20
    per_thread, per_turn = (idle - before) / IDLE_THREADS / 1024, took / IDLE_THREADS * 1000
    print(
        f"  {'idle memory: 1,000 threads of 10 agents':<44} RSS {before / 2**20:7.1f} MB before, "
        f"{after / 2**20:7.1f} MB after the turns, {idle / 2**20:7.1f} MB idle: +{grown:.1f} MB "
        f"({per_thread:.1f} KB a thread; {per_turn:.0f} ms a turn)"
    )
    print(f"  {'':<44} tether serve's tree (psutil); no floor: the growth is the figure")
