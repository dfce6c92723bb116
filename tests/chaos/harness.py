"""A chaos run: people write to the bot while the real gateway is killed (SIGKILL) and stopped
(SIGTERM) at random instants and started again on the same home; in the "multi" scenario
`nanomem dream` and `nanomem chat -m` processes work on that home at the same time. Then every
process is stopped and the home is judged (tests/chaos/checks.py)."""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.chaos import checks
from tests.chaos.processes import NANOMEM, Children, Gateway, Sizes, gateway_env, home_env
from tests.chaos.report import Report
from tests.fakes.openai_server import FakeOpenAI, memory_aware
from tests.fakes.telegram_server import FakeTelegram

FIRST_CHAT = 1000
DOWN_MAX_S = 1.0  # the gateway stays down up to this long between a signal and the restart
READY_S = 90.0  # bound on a start that never reaches the Bot API
WARM_S = 2.0  # a gateway's first turn also imports litellm (about 2 s)
# About 130 tokens, so that a few turns fill the small context window of processes.Sizes.
PADDING = "lorem ipsum dolor sit amet " * 25


@dataclass
class Options:
    scenario: str = "gateway"  # or "multi"
    kills: int = 20
    terms: int = 5
    chats: int = 20
    messages: int = 3
    latency: float = 1.5
    seed: int = 1
    dreams: int = 20  # multi: `nanomem dream` runs, two at a time
    dream_kills: int = 0  # multi: of those rounds, how many have one run SIGKILLed
    cli_turns: int = 5  # multi: `chat -m` turns by each of two writers on one session
    # Their `--session`: a name (cli:<name>) or a whole key; by default the gateway's first chat,
    # so the writers and the gateway take turns on one session.
    cli_session: str = "telegram:1000"
    quiet_s: float = 0.0  # the final drain ends after this long without a reply (0: derived)
    drain_cap_s: float = 300.0
    run_dir: Path | None = None  # kept for inspection; a temporary one is removed if all is well
    sizes: Sizes = field(default_factory=Sizes)


@dataclass(frozen=True)
class Plan:
    """Everything random about a run, drawn from the seed before it starts."""

    signals: list[signal.Signals]
    up: list[float]  # per cycle: when the signal comes, as a share of the busy window
    down: list[float]  # per cycle: seconds down before the restart
    sends: list[tuple[float, int, int]]  # (share of the signal phase, chat, number), in time order
    dream_kills: dict[int, float]  # multi: Dream round -> when one run is killed (lifetime share)

    @classmethod
    def draw(cls, options: Options) -> Plan:
        rng = random.Random(options.seed)
        signals = [signal.SIGKILL] * options.kills + [signal.SIGTERM] * options.terms
        rng.shuffle(signals)
        up = [rng.random() for _ in signals]
        down = [rng.uniform(0, DOWN_MAX_S) for _ in signals]
        sends = []
        for chat in range(FIRST_CHAT, FIRST_CHAT + options.chats):
            times = sorted(rng.random() for _ in range(options.messages))
            sends += [(t, chat, n) for n, t in enumerate(times, start=1)]
        rounds = (options.dreams + 1) // 2
        killed = rng.sample(range(1, rounds + 1), min(rounds, options.dream_kills))
        return cls(signals, up, down, sorted(sends), {r: rng.random() for r in killed})


class Sender(threading.Thread):
    """Sends the planned messages over `duration_s`; `hurry` sends the rest at once."""

    def __init__(self, telegram: FakeTelegram, plan: Plan, duration_s: float) -> None:
        super().__init__(name="chaos-sender", daemon=True)
        self.telegram, self.plan, self.duration_s = telegram, plan, duration_s
        self.sent: list[checks.Sent] = []
        self._hurry = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        for share, chat, number in self.plan.sends:
            self._hurry.wait(max(0.0, started + share * self.duration_s - time.monotonic()))
            text = f"{PADDING}\nnote {number} from chat {chat}: {checks.token(chat, number)}"
            update = self.telegram.send_text(chat, text)
            self.sent.append(checks.Sent(chat, number, int(update["update_id"])))

    def hurry(self) -> None:
        self._hurry.set()


class Worker(threading.Thread):
    """Runs rounds of commands (multi scenario): the commands of a round at the same time,
    each bounded, then a pause before the next round."""

    def __init__(
        self,
        name: str,
        children: Children,
        env: dict[str, str],
        rounds: list[list[list[str]]],
        pause_s: float = 0.0,
        kills: dict[int, float] | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.children, self.env, self.rounds, self.pause_s = children, env, rounds, pause_s
        self.kills = kills or {}  # round -> when its first command is killed (lifetime share)
        self.lifetime_s = 4.0  # how long a command lives; the longest seen replaces the guess
        self.results: list[tuple[list[str], int, str]] = []  # (args, exit code, output)

    def run(self) -> None:
        with contextlib.suppress(RuntimeError):  # the run ended early: start nothing more
            self._rounds()

    def _rounds(self) -> None:
        for number, jobs in enumerate(self.rounds, start=1):
            started = [
                self.children.start(
                    f"{self.name}-{number:02d}{'abcdefgh'[i]}", [*NANOMEM, *a], self.env
                )
                for i, a in enumerate(jobs)
            ]
            began = time.monotonic()
            if (share := self.kills.get(number)) is not None:
                time.sleep(share * self.lifetime_s)
                started[0].proc.kill()  # at any instant of its life, a commit included
            for args, child in zip(jobs, started, strict=True):
                code = self.children.reap(child, 180)
                self.results.append((args, code, child.output()))
                if code >= 0:
                    self.lifetime_s = max(self.lifetime_s, time.monotonic() - began)
            if number < len(self.rounds):
                time.sleep(self.pause_s)


def run(options: Options) -> Report:
    """One whole run; every process it started has ended when it returns."""
    made_dir = options.run_dir is None
    run_dir = options.run_dir or Path(tempfile.mkdtemp(prefix="nanomem-chaos-"))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    home = Home(run_dir / "home")
    onboard(home)
    before = checks.memory_lines(home.workspace)
    children = Children(run_dir / "logs")
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(memory_aware(latency=options.latency))
        try:
            report = _run(options, home, telegram, llm, children, before)
        finally:
            children.kill_all()
    report.run_dir = str(run_dir)
    if made_dir and not report.failures():
        shutil.rmtree(run_dir, ignore_errors=True)
        report.run_dir = ""
    return report


def _run(
    options: Options,
    home: Home,
    telegram: FakeTelegram,
    llm: FakeOpenAI,
    children: Children,
    before: Counter[tuple[str, str]],
) -> Report:
    plan = Plan.draw(options)
    env = home_env(home.root, llm, options.sizes)
    chats = list(range(FIRST_CHAT, FIRST_CHAT + options.chats))
    gateway = Gateway(children, gateway_env(env, telegram, chats), telegram)
    report = Report(options.scenario, seed=options.seed)

    spawned = time.monotonic()
    gateway.start()
    if not gateway.wait_polling(READY_S):
        report.notes.append("the first gateway never polled the Bot API")
    startup_s = time.monotonic() - spawned
    # The busy window: starting, replaying, loading the model library, answering; a signal
    # lands anywhere inside it.
    window_s = startup_s + WARM_S + 3 * options.latency + 1.0
    cycles = len(plan.signals)
    sender = Sender(telegram, plan, max(1.0, cycles * (window_s / 2 + DOWN_MAX_S / 2 + 0.3)))
    sender.start()
    multi = options.scenario == "multi"
    workers = _workers(options, plan, children, env, sender.duration_s) if multi else []
    for worker in workers:
        worker.start()

    for cycle, sig in enumerate(plan.signals):
        if cycle:
            spawned = time.monotonic()
            gateway.start()
        time.sleep(max(0.0, spawned + plan.up[cycle] * window_s - time.monotonic()))
        gateway.signal(sig)
        report.kills += sig == signal.SIGKILL
        report.terms += sig == signal.SIGTERM
        time.sleep(plan.down[cycle])
    sender.hurry()
    sender.join()

    if not gateway.running:  # with no signals planned, the first one still runs
        gateway.start()
        gateway.wait_polling(READY_S)
    quiet_s = options.quiet_s or 15.0 + 4 * options.latency
    _drain(telegram, sender.sent, quiet_s, options.drain_cap_s)
    for worker in workers:
        worker.join(options.drain_cap_s)
    _drain(telegram, sender.sent, quiet_s, options.drain_cap_s)  # what the workers delayed
    if gateway.signal(signal.SIGTERM) != 0:
        report.notes.append(f"the final SIGTERM ended the gateway with {gateway.exit_codes[-1]}")
    if gateway.hung_stops:
        report.notes.append(f"{gateway.hung_stops} SIGTERMs needed a SIGKILL")

    report.dream_after = _final_dreams(children, env, report)
    _judge(report, home, telegram, sender.sent, workers, before, _session_key(options))
    if "Traceback (most recent call last)" in gateway.logs():
        report.notes.append("a gateway log holds a traceback (see the logs folder)")
    return report


def _workers(
    options: Options, plan: Plan, children: Children, env: dict[str, str], duration_s: float
) -> list[Worker]:
    """Two `nanomem dream` at a time, in rounds spread over the run, and two `chat -m` writers
    on one shared session."""
    rounds = [[["dream"], ["dream"]] for _ in range(options.dreams // 2)]
    rounds += [[["dream"]]] * (options.dreams % 2)
    pause_s = duration_s / max(1, len(rounds))
    workers = [Worker("dream", children, env, rounds, pause_s, plan.dream_kills)]
    for writer in (1, 2):
        texts = [
            f"{PADDING}\nline {turn} of writer {writer}: w{writer}t{turn:02d}"
            for turn in range(1, options.cli_turns + 1)
        ]
        turns = [[["chat", "-m", text, "--session", options.cli_session]] for text in texts]
        workers.append(Worker(f"writer{writer}", children, env, turns))
    return workers


def _session_key(options: Options) -> str:
    name = options.cli_session
    return name if ":" in name else f"cli:{name}"


def _drain(telegram: FakeTelegram, sent: list[checks.Sent], quiet_s: float, cap_s: float) -> None:
    """Wait until every message is acknowledged and answered, or replies stop coming."""
    deadline = time.monotonic() + cap_s
    replies, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_replies = len(telegram.sent_messages())
        if now_replies != replies:
            replies, last_change = now_replies, time.monotonic()
        state = checks.delivery(telegram, sent)
        if state.answered == state.sent and state.unacknowledged == 0:
            return
        if time.monotonic() - last_change > quiet_s:
            return
        time.sleep(0.25)


def _final_dreams(children: Children, env: dict[str, str], report: Report) -> str:
    """`nanomem dream` until it has nothing new to learn: "ok", or "failed" on any bad exit."""
    for number in range(1, 21):
        child = children.run(f"final-dream-{number:02d}", [*NANOMEM, "dream"], env)
        output = child.output().strip()
        if child.proc.returncode != 0:
            report.notes.append(f"final dream {number} exited {child.proc.returncode}: {output}")
            return "failed"
        if "Nothing new to learn" in output:
            return "ok"
    report.notes.append("Dream still had something new after 20 runs")
    return "failed"


def _judge(
    report: Report,
    home: Home,
    telegram: FakeTelegram,
    sent: list[checks.Sent],
    workers: list[Worker],
    before: Counter[tuple[str, str]],
    cli_key: str,
) -> None:
    got = checks.delivery(telegram, sent)
    report.sent, report.acknowledged, report.answered = got.sent, got.acknowledged, got.answered
    report.lost, report.unacknowledged = got.lost, got.unacknowledged
    report.duplicated, report.order_violations = got.duplicated, got.order_violations
    report.notices = got.notices
    if got.lost_tokens:
        report.notes.append(f"lost: {' '.join(got.lost_tokens)}")
    files = checks.check_files(home.root, home.workspace)
    report.files_checked, report.files_unreadable = files.checked, files.unreadable
    report.notes += files.notes
    report.fsck_clean, detail = checks.git_fsck(home.root)
    if not report.fsck_clean or "lock files" in detail:
        report.notes.append(f"git fsck: {detail}")
    report.duplicated_lines = checks.duplicated_lines(home.workspace, before)
    covered = checks.coverage(home.workspace)
    report.history_entries, report.skipped_entries = covered.entries, covered.skipped
    report.notes += covered.notes[:10]
    keys = [f"telegram:{chat}" for chat in sorted({s.chat for s in sent})]
    expected: dict[str, list[str]] = {}
    for worker in workers:
        for args, code, output in worker.results:
            if args[0] == "dream":
                report.dream_runs += 1
                report.dream_kills += code == -signal.SIGKILL
                if code in (0, -signal.SIGKILL):
                    continue
                if "Dream is already running" in output:
                    report.dream_refused += 1
                else:
                    report.dream_failures += 1
                    report.notes.append(f"dream exit {code}: {output.strip()[-300:]}")
            elif code == 0:
                expected.setdefault(cli_key, []).append(checks.tokens_in(args[2])[0])
            else:
                report.cli_failures += 1
    keys += [key for key in expected if key not in keys]
    faults = checks.session_faults(home.root, keys, expected)
    report.session_faults = len(faults) + report.cli_failures
    report.notes += faults[:10]
