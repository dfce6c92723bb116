"""The `nanomem` command. Heavy imports happen inside commands, so `--help` stays instant."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanomem.cli import doctor, parked, pydantic_plugins, subcommands
from nanomem.text.escapes import strip_escapes  # only `re`: --help stays instant
from nanomem.text.plural import plural

FILES = ("file or folder", "files and folders")

if TYPE_CHECKING:
    from nanomem.agent import MessageBus, OutboundMessage
    from nanomem.app import App
    from nanomem.cli.first_run import Choices
    from nanomem.config import Settings
    from nanomem.home import Home

EXIT_CONFIG = 2
NO_MODEL = (
    "no model configured: set llm.model in {config} or the environment variable "
    "NANOMEM_LLM__MODEL (for example openai/gpt-4o-mini, or openai/<name> with "
    "NANOMEM_LLM__API_BASE for an OpenAI-compatible server)"
)


# loguru adds a stderr sink when it is first imported, unless this variable says no.
LOGURU_SWITCH = "LOGURU_AUTOINIT"
_switched_off_by_us = False


def _quiet_until_logging_is_set_up() -> None:
    """Nothing may reach stderr before setup_logging says how. Importing loguru here to remove
    its sink would make the chat prompt wait ~25 ms; the variable does it at no cost."""
    global _switched_off_by_us
    if "loguru" in sys.modules:  # already imported (an in-process caller)
        from loguru import logger

        logger.remove()
    elif LOGURU_SWITCH not in os.environ:
        os.environ[LOGURU_SWITCH] = "False"
        _switched_off_by_us = True


class CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def version() -> str:
    """The installed package's version (a checkout that was never installed: the source's)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("nanomem")
    except PackageNotFoundError:
        from nanomem import __version__

        return __version__


class _PrintVersion(argparse.Action):
    """`--version`, reading the package metadata only when asked (not on every start)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"nanomem {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nanomem", description="A personal chat agent that remembers."
    )
    parser.add_argument(
        "--version", action=_PrintVersion, nargs=0, help="print the version and exit"
    )
    parser.add_argument(
        "--home", type=Path, help="home folder (default $NANOMEM_HOME or ~/.nanomem)"
    )
    parser.add_argument("--config", type=Path, help="config file (default <home>/config.toml)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    onboard = commands.add_parser("onboard", help="create the home folder, config and workspace")
    onboard.add_argument("--model", help="model to write into config.toml (llm.model)")
    onboard.add_argument("--api-base", help="server URL to write into config.toml (llm.api_base)")

    chat = commands.add_parser("chat", help="chat in the terminal (or one turn with -m)")
    chat.add_argument(
        "-m", "--message", help="send one message, print the reply, exit ('-' reads stdin)"
    )
    chat.add_argument(
        "--session",
        default="direct",
        help="session name (key cli:NAME); with -m also a whole key such as telegram:123",
    )
    chat.add_argument("--room", action="store_true", help="with -m: as in a group chat")
    _add_overrides(chat)

    status = commands.add_parser("status", help="show configuration and state (no model call)")
    _add_overrides(status)

    dream = commands.add_parser("dream", help="learn from new history now (like /dream)")
    _add_overrides(dream)
    memory = commands.add_parser("memory", help="inspect or undo memory changes")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True, metavar="ACTION")
    log = memory_commands.add_parser("log", help="the latest memory change, or one by id")
    log.add_argument("sha", nargs="?", default="", help="a version id (any unique 4+ prefix)")
    restore = memory_commands.add_parser("restore", help="list versions, or undo one by id")
    restore.add_argument("sha", nargs="?", default="", help="the version to undo")
    why = memory_commands.add_parser("why", help="where a remembered line came from (like /why)")
    why.add_argument("words", nargs="*", help="words from the line")
    for action in (log, restore, why):
        _add_overrides(action)

    parser.set_defaults(owners=subcommands.add_parsers(commands))
    gateway = commands.add_parser(
        "gateway",
        help="serve the enabled channels (Telegram, the API at /v1) and GET /health until SIGTERM",
        description="Run the agent for every enabled channel, with GET /health on "
        "gateway.host:gateway.port. SIGTERM/SIGINT stop it gracefully (in-flight replies get "
        "gateway.grace_s seconds); a second signal stops it at once.",
    )
    _add_overrides(gateway)
    subcommands.home_options_anywhere(parser)
    return parser


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="override llm.model")
    parser.add_argument("--api-base", help="override llm.api_base")
    parser.add_argument("--workspace", type=Path, help="override agent.workspace")
    parser.add_argument("--log-level", help="override log.level")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    pairs = {
        ("llm", "model"): getattr(args, "model", None),
        ("llm", "api_base"): getattr(args, "api_base", None),
        ("agent", "workspace"): getattr(args, "workspace", None),
        ("log", "level"): getattr(args, "log_level", None),
    }
    result: dict[str, Any] = {}
    for (section, key), value in pairs.items():
        if value is not None:
            result.setdefault(section, {})[key] = value
    return result


def main(argv: list[str] | None = None) -> int:
    os.umask(0o077)  # conversations and logs are the owner's alone (see nanomem.private)
    _quiet_until_logging_is_set_up()
    pydantic_plugins.switch_off()
    args = build_parser().parse_args(argv)
    try:
        owner = args.owners.get(args.command)
        handler = (
            subcommands.handler(owner)
            if owner
            else {
                "onboard": cmd_onboard,
                "chat": cmd_chat,
                "status": cmd_status,
                "gateway": cmd_gateway,
                "dream": cmd_dream,
                "memory": cmd_memory,
            }[args.command]
        )
        code = handler(args)
        sys.stdout.flush()  # a reader that left is found here, not by the flush at exit
        return code
    except BrokenPipeError:  # stdout's reader closed it (`| head`): any command, any write
        from nanomem.cli.closed_stdout import reader_gone

        return reader_gone()
    except CliError as exc:
        shown = strip_escapes(str(exc))  # may quote a file
        print(f"nanomem: {shown}{doctor.hint(args.command, exc.code)}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last boundary: one line for the person, details in the log
        from loguru import logger

        logger.opt(exception=exc).error("unexpected failure")
        shown = strip_escapes(f"{type(exc).__name__}: {exc}")
        print(f"nanomem: internal error: {shown}", file=sys.stderr)
        return 1


def _home(args: argparse.Namespace) -> Home:
    from nanomem.config import default_home
    from nanomem.home import Home

    return Home((args.home or default_home()).expanduser().resolve())


def _config_path(args: argparse.Namespace, home: Home) -> Path:
    if args.config is not None:
        path: Path = args.config.expanduser()
        if not path.exists():
            raise CliError(f"config error: the config file {path} does not exist", EXIT_CONFIG)
        return path
    return home.config


def _settings(args: argparse.Namespace, home: Home) -> Settings:
    from nanomem.config import ConfigError, load_settings

    try:
        return load_settings(_config_path(args, home), _overrides(args))
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None


def cmd_onboard(args: argparse.Namespace) -> int:
    from nanomem.cli.first_run import Choices

    _first_run(args, _home(args), Choices(args.model or "", args.api_base or ""))
    return 0


def _first_run(args: argparse.Namespace, home: Home, given: Choices) -> bool:
    """Onboard `home`; `given` (onboard's flags) is written. A new config is completed by
    questions on a terminal, never elsewhere. Returns whether questions were asked."""
    from nanomem.cli.first_run import ask_missing
    from nanomem.cli.onboard import ensure_secrets, onboard, set_config_values
    from nanomem.cli.telegram_setup import ask_telegram, save_telegram
    from nanomem.providers import model_name_problem

    known = _settings(args, home).llm  # flags, the environment, an existing file
    fresh = not home.config.exists()
    interactive = fresh and sys.stdin.isatty()
    try:
        if interactive:
            print(f"Setting up nanomem in {home.root}")
            given = ask_missing(known, given)
        elif problem := model_name_problem(given.model, given.api_base or known.api_base):
            raise ValueError(problem)
        telegram = ask_telegram(_settings(args, home).telegram, home.config, fresh, args.command)
    except ValueError as exc:
        raise CliError(f"config error: {exc} (command line)", EXIT_CONFIG) from None
    except EOFError:  # Ctrl-D at a question
        print()
        raise CliError("setup cancelled; nothing was written") from None
    report = onboard(home, model=given.model, api_key=given.api_key, api_base=given.api_base)
    for path in report.created:
        print(f"created {path}")
    if telegram is not None:
        print(save_telegram(home.config, home.lock("config"), telegram))
    ensure_secrets(_settings(args, home), _config_path(args, home), home, args.command)
    chosen = {k: v for k, v in (("model", given.model), ("api_base", given.api_base)) if v}
    if chosen and not fresh:  # an explicit flag is a request to change the existing file
        set_config_values(home.config, "llm", chosen, home.lock("config"))
        print("\n".join(f"set llm.{key} in {home.config}" for key in chosen))
    tightened = [p for p in report.tightened if p not in report.created and p != home.root]
    if tightened:
        print(f"made {plural(len(tightened), *FILES)} in {home.root} private (owner only)")
    if not (report.created or tightened or given.model or given.api_base or telegram):
        print(f"{home.root} is already set up; nothing changed")
    return interactive


def cmd_status(args: argparse.Namespace) -> int:
    from nanomem.cli.status import status_rows

    home = _home(args)
    rows = [
        *status_rows(home, _settings(args, home), _config_path(args, home), version()),
        *parked.status_lines(home),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    # Keep the terminal and `-m` output clean: logs go to the file, and to stderr only for
    # errors, unless the person asked for a level on the command line.
    stderr_level = args.log_level or "ERROR"
    if args.message is None and sys.stdin is not None and not sys.stdin.isatty():
        args.message = "-"  # `echo hi | nanomem chat`: what is piped in is the one message
    if args.message is not None:
        text = _message_text(args.message)  # an empty message sets nothing up
        # What is loaded and built before the turn (modules, settings, the app and its model
        # client) lives as long as the process: no collection walks it while it is made (there
        # is little to free: ~1,200 of 46,000 objects), and none after: it is frozen once built.
        gc.disable()
        app = _app(args, needs_model=True, stderr_level=stderr_level)
        gc.freeze()
        gc.enable()
        return asyncio.run(_one_shot(app, args.session, text, args.room))
    if ":" in args.session:
        raise CliError("--session takes a name here; whole keys (telegram:123) go with -m")
    home, settings = _configured(args, needs_model=True, ask=True)
    return asyncio.run(_interactive(home, settings, args.session, stderr_level, args.config))


def _message_text(message: str) -> str:
    """The message as valid UTF-8 text: bytes that are not become U+FFFD, said once on stderr."""
    from nanomem.text.utf8 import clean_text, decode, is_valid

    if message == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        text, valid = decode(stdin.read()) if stdin is not None else (sys.stdin.read(), True)
    else:
        text, valid = message, True  # argv bytes that are not UTF-8 arrive as lone surrogates
    if not (valid and is_valid(text)):
        text = clean_text(text)
        note = "the message is not valid UTF-8; invalid bytes were replaced by U+FFFD"
        print(f"nanomem: {note}", file=sys.stderr)
    if not text.strip():
        if message == "-":
            raise CliError("nothing to send: stdin was empty (pipe a message in, or use -m TEXT)")
        raise CliError("the message is empty")
    return text


def _ask_for_model(args: argparse.Namespace, home: Home) -> Settings:
    from nanomem.cli.first_run import ask_model_now

    config = _config_path(args, home)
    print(NO_MODEL.format(config=config))
    try:
        if ask_model_now(_settings(args, home).llm, config, home.lock("config")):
            return _settings(args, home)
    except EOFError:  # Ctrl-D at the question
        print()
    raise CliError("no model configured; nothing was saved", EXIT_CONFIG)


async def _one_shot(app: App, session: str, text: str, room: bool) -> int:
    from nanomem.agent import InboundMessage, Text
    from nanomem.audience import Sender
    from nanomem.cli.stdout_stream import StdoutStream

    # A whole key continues another channel's conversation (its reply is printed here).
    channel, chat = (session.split(":", 1)) if ":" in session else ("cli", session)
    stream = StdoutStream(app.workspace)
    # The owner's one-shot: nobody stays at a prompt to answer a question. A group chat by
    # --room, or by its session's stored word (a room stays one: AgentLoop._as_stored).
    sender = Sender("user", is_owner=True, shared_room=room)
    msg = InboundMessage(channel, chat, text, sender)
    reply = await app.loop.handle(msg, progress=stream.show)
    await app.loop.close(grace_s=30)
    try:
        code = 1
        if reply is None:
            stream.end()
            print("nanomem: the turn was stopped", file=sys.stderr)
        elif isinstance(reply.part, Text) and reply.part.style == "error":
            stream.end()
            print(f"nanomem: {' '.join(strip_escapes(reply.content).split())}", file=sys.stderr)
        else:
            stream.finish(reply.content)
            code = 0
        await _background_tasks(app)
        stream.check()  # the reader left mid-turn: main leaves quietly (the turn is saved)
        return code
    finally:
        await app.aclose()


async def _background_tasks(app: App) -> None:
    """Tasks the message started run to their end before the one-shot exits; their results
    are printed after the reply (they are in the session's transcript too)."""
    from nanomem.features.tasks import BackgroundTasks

    try:
        tasks = app.feature(BackgroundTasks)
    except LookupError:
        return
    if tasks.running:
        print(f"nanomem: waiting for {tasks.running} background task(s)", file=sys.stderr)
    for record in await tasks.wait():
        print(f"\n{strip_escapes(tasks.report(record))}", flush=True)


async def _interactive(
    home: Home, settings: Settings, session: str, stderr_level: str, config: Path | None
) -> int:
    """The prompt comes first; the app is built behind it while the person types (what they
    send meanwhile waits on the bus), then litellm and the tokenizer load the same way."""
    from nanomem.agent import MessageBus, Reach, Unread, pump_outbound
    from nanomem.channel_registry import load_channel
    from nanomem.text.masking import (
        configured_secrets,
        register_environment_secrets,
        register_secrets,
    )

    # Known before the first line is typed: the prompt's history file masks them.
    register_environment_secrets()
    register_secrets(configured_secrets(settings))
    bus = MessageBus()
    configured = settings.agent.workspace  # as the app will resolve it (app.workspace_of)
    workspace = configured.expanduser().resolve() if configured else home.workspace
    channel = load_channel("terminal")(
        history_file=home.chat_history, chat_id=session, workspace=workspace, unread=Unread.of(home)
    )
    await channel.start(bus)
    if home.dream_review.exists():  # a Dream change waits: the owner hears of it first thing
        await channel.send(_review_notice(home.dream_review, session))
    drawn = asyncio.Event()
    chat = asyncio.create_task(channel.run_until_exit(settings.llm.model, on_ready=drawn.set))
    workers = [asyncio.create_task(pump_outbound(channel, bus), name="terminal-outbox")]
    app: App | None = None
    try:
        first_draw = asyncio.ensure_future(drawn.wait())
        await asyncio.wait([chat, first_draw], return_when=asyncio.FIRST_COMPLETED)
        first_draw.cancel()
        if not chat.done():
            app = await asyncio.to_thread(_build, home, settings, stderr_level, bus, config=config)
            workers.append(asyncio.create_task(app.loop.run(), name="agent-loop"))
            # Dream runs on its interval while the chat is open; what background work tells
            # this chat unasked (a task's result) is shown above the prompt.
            mine = f"{channel.name}:{session}"
            await app.start_features(Reach({channel.name}, lambda chat, _: chat == mine))
            app.warm_up()
        await chat
    finally:
        if app is not None:
            await app.stop_features(grace_s=5)
            await app.loop.close(grace_s=5)
            await app.aclose()
        for task in [*workers, chat]:
            task.cancel()
        await asyncio.gather(*workers, chat, return_exceptions=True)
        await channel.stop()
    return 0


def _review_notice(path: Path, session: str) -> OutboundMessage:
    from nanomem.agent import OutboundMessage, Text
    from nanomem.features.dream import PendingChange

    try:
        pending = PendingChange.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return OutboundMessage("cli", session, Text("A Dream change waits: /dream-log shows it."))
    return OutboundMessage("cli", session, Text(pending.describe(), buttons=pending.buttons()))


def cmd_gateway(args: argparse.Namespace) -> int:
    from nanomem.cli.onboard import ensure_secrets
    from nanomem.config import ConfigError
    from nanomem.gateway.claim import AlreadyRunning, claim
    from nanomem.gateway.service import Gateway, finish, serve

    # A fresh container volume is onboarded silently and configured by environment variables.
    home, settings = _configured(args, needs_model=True)
    try:  # claimed before the app is built: a running gateway's home is left alone
        with claim(home, settings.gateway.port) as held:
            if ensure_secrets(settings, _config_path(args, home), home):  # never keyless
                settings = _settings(args, home)
            app = _build(home, settings, args.log_level, durable=True, config=args.config)
            code = serve(Gateway.from_app(app), listening=held.announce)
    except (ConfigError, AlreadyRunning) as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None
    finish(code)  # no interpreter teardown: a signal then would exit 143


def _app(args: argparse.Namespace, *, needs_model: bool, stderr_level: str | None) -> App:
    home, settings = _configured(args, needs_model=needs_model)
    return _build(home, settings, stderr_level, config=args.config)


def _build(
    home: Home,
    settings: Settings,
    stderr_level: str | None,
    bus: MessageBus | None = None,
    *,
    durable: bool = False,
    config: Path | None = None,  # --config: hidden from shell commands like the home
) -> App:
    """Logging, then the app (most of nanomem, imported only now)."""
    from nanomem.app import build_app
    from nanomem.log import setup_logging
    from nanomem.tools import hide_environment

    # Before any key is used: commands run without the sandbox are our own user's processes.
    hide_environment()
    setup_logging(settings.log.level, home.logs, stderr_level=stderr_level)
    if _switched_off_by_us:  # loguru is set up: commands the agent runs must not inherit it
        os.environ.pop(LOGURU_SWITCH, None)
    return build_app(settings, home, bus=bus, durable=durable, config=config)


def _configured(
    args: argparse.Namespace, *, needs_model: bool, ask: bool = False
) -> tuple[Home, Settings]:
    """Home (onboarded if missing, made private) and settings. With `ask`, a person at a
    terminal is asked for what is missing instead of being told to set it."""
    from nanomem.cli import preflight
    from nanomem.cli.first_run import Choices
    from nanomem.cli.onboard import onboard
    from nanomem.config import ConfigError
    from nanomem.private import make_private

    home = _home(args)
    asked = False
    if not home.config.exists() and args.config is None:
        if ask:
            asked = _first_run(args, home, Choices())
        else:
            onboard(home)
    if tightened := make_private(home):
        print(
            f"nanomem: made {plural(len(tightened), *FILES)} in {home.root} private "
            "(they were readable by others)",
            file=sys.stderr,
        )
    settings = _settings(args, home)
    if needs_model and not settings.llm.model:
        if asked or not (ask and sys.stdin.isatty()):  # the person chose to set it later
            raise CliError(NO_MODEL.format(config=_config_path(args, home)), EXIT_CONFIG)
        settings = _ask_for_model(args, home)
    config, overrides = _config_path(args, home), _overrides(args)
    try:
        if needs_model:
            preflight.check_model_names(settings, config, overrides)
        if workspace := preflight.missing_workspace(settings, config, overrides):
            question = f"The workspace {workspace} does not exist. Create it? [y/N] "
            if not (ask and sys.stdin.isatty() and _yes(question)):
                raise preflight.workspace_missing_error(workspace, config, overrides)
            onboard(home, workspace=workspace)
            print(f"created {workspace}")
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None
    return home, settings


def _yes(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def cmd_dream(args: argparse.Namespace) -> int:
    from nanomem.cli.progress_line import ProgressLine
    from nanomem.features.dream import DreamBusy, Dreaming, DreamResult
    from nanomem.memory import GitStoreError

    app = _app(args, needs_model=True, stderr_level=args.log_level or "ERROR")
    progress = ProgressLine(sys.stderr, "dream")

    async def dream_once() -> DreamResult:
        try:
            return await app.feature(Dreaming).dream.run("cli", progress)
        finally:
            progress.clear()
            await app.aclose()

    try:
        result = asyncio.run(dream_once())
    except DreamBusy:
        raise CliError("Dream is already running") from None
    except GitStoreError as exc:  # a memory file it must not read (a link), say
        raise CliError(str(exc)) from None
    print(strip_escapes(result.describe()))  # it quotes what the model wrote
    return 1 if result.status == "failed" else 0


def cmd_memory(args: argparse.Namespace) -> int:
    from nanomem.features.dream import DREAM_IS_RUNNING, SHELL, DreamBusy, Dreaming, MemoryCommands
    from nanomem.memory import GitStoreError

    words = " ".join(getattr(args, "words", []))
    if args.memory_command == "why" and not words.strip():  # checked before anything is opened
        raise CliError("usage: nanomem memory why <words from a remembered line>", code=2)
    app = _app(args, needs_model=False, stderr_level=args.log_level or "ERROR")
    texts = MemoryCommands(app.feature(Dreaming).dream, app.git, SHELL)
    try:
        if args.memory_command == "why":
            from nanomem.features.dream import Provenance

            print(strip_escapes(Provenance(app.git, app.history).answer(words)))
        elif args.memory_command == "log":
            print(strip_escapes(texts.log_text(args.sha)))  # memory files are model-written
        elif args.sha:
            print(strip_escapes(texts.restore_text(args.sha)))
        else:
            print(strip_escapes(texts.versions_text(limit=50)))
    except GitStoreError as exc:
        raise CliError(str(exc)) from None
    except DreamBusy:
        raise CliError(DREAM_IS_RUNNING) from None
    return 0
