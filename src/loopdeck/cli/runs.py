"""`loopdeck run` headless or in the console, and `loopdeck console`, the launcher.

Light at import, like the package: the console paints its first frame before the run's
heavy imports, which each function makes when it needs them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from loopdeck import tuning
from loopdeck.cli import acp_command
from loopdeck.cli.notify_flags import notify_settings
from loopdeck.cli.parser import EXIT_BAD_INPUT, EXIT_GOAL_MET, EXIT_STOPPED, budget_overrides
from loopdeck.stop_signals import StopSignals
from loopdeck.store.base import Location, default_db_path, made_store

if TYPE_CHECKING:
    from loopdeck.core.outcome import RunOutcome
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.otel_export import LiveTrace
    from loopdeck.operator.session import RunSession
    from loopdeck.tui.app import LoopdeckApp


def options(args: argparse.Namespace) -> RunOptions:
    """`loopdeck run`'s (or `loopdeck acp`'s) flags as the run's options."""
    from loopdeck.operator.launch import RunOptions

    if args.command == "gateway":
        from loopdeck.cli.gateway_command import gateway_options

        chosen = gateway_options(args)
        chosen.policy, chosen.notify = args.policy, notify_settings(args)
        return chosen
    if args.command == "acp":
        chosen = acp_command.acp_options(args)
        chosen.policy, chosen.notify = args.policy, notify_settings(args)
        return chosen

    return RunOptions(
        env=args.env,
        script=args.script,
        model=args.model,
        api_base=args.api_base,
        mode=args.mode,
        approve=args.approve,
        budget_overrides=budget_overrides(args),
        run_id=args.run_id,
        model_timeout_s=args.model_timeout,
        pause_at=args.pause_at,
        settings=list(args.settings),
        policy=args.policy,
        notify=notify_settings(args),
    )


# What each console-opening command can do instead, without a terminal.
WITHOUT_A_TERMINAL = {
    "run": "add --headless (and --json for one JSON object) to run without the console",
    "acp": "add --headless (and --json for one JSON object) to run without the console",
    "gateway": "add --headless (and --json for one JSON object) to run without the console",
    "console": "`loopdeck runs` and `loopdeck pending` read the store without it",
    "attach": "`loopdeck pending`, `approve`, `answer` and `cancel` act on the run without it",
    "replay": "`loopdeck export RUN_ID` prints the run's events without it",
}


# The driver textual-serve (`loopdeck serve`) gives each browser tab's console.
WEB_DRIVER = "textual.drivers.web_driver:WebDriver"


def no_terminal(command: str) -> str | None:
    """Why the console cannot open here, or None: it reads keys from stdin and draws on
    stderr, and stdout is the terminal it leaves its last line on. Into a pipe or a file it
    would draw escape codes, at full speed, until killed. Under textual-serve's web driver the
    pipes are the browser's terminal: keys in, frames out, in that driver's packets."""
    if os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER:
        return None
    streams = {"stdin": sys.stdin, "stdout": sys.stdout, "stderr": sys.stderr}
    missing = [name for name, stream in streams.items() if not _is_terminal(stream)]
    if not missing:
        return None
    named = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
    return (
        f"the console needs a terminal, and {named} "
        f"{'is' if len(missing) == 1 else 'are'} not one (piped or redirected): "
        f"run `loopdeck {command}` in a terminal, or {WITHOUT_A_TERMINAL[command]}"
    )


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)  # None when Python has no such stream
    try:
        return isatty is not None and bool(isatty())
    except ValueError:  # closed
        return False


def refused_without_terminal(command: str) -> bool:
    """Says why and returns True when there is no terminal for the console."""
    if (missing := no_terminal(command)) is None:
        return False
    print(f"loopdeck: {missing}", file=sys.stderr)
    return True


def run_headless(args: argparse.Namespace) -> int:
    from loopdeck.cli.summary import print_json, print_summary
    from loopdeck.core.states import StopReason
    from loopdeck.operator.session import RunAbandoned

    if args.command == "acp" and acp_command.refused(args):
        return EXIT_BAD_INPUT
    tuning.for_headless()
    signals = StopSignals()
    try:
        trace = live_trace(args)
    except BadTraceEndpoint as exc:
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    async def recorded() -> RunOutcome:
        signals.install()
        try:
            return await run_recorded_headless(options(args), args.db, signals, trace)
        finally:
            signals.remove()

    try:
        outcome = asyncio.run(recorded())
    except RunAbandoned as exc:
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    if args.json:
        print_json(outcome)
    else:
        print_summary(outcome)
    if trace is not None:
        send_trace(trace, outcome.run_id, args.db)
    return EXIT_GOAL_MET if outcome.stop_reason is StopReason.GOAL_MET else EXIT_STOPPED


async def run_recorded_headless(
    options: RunOptions,
    db: Location | None,
    signals: StopSignals | None = None,
    trace: LiveTrace | None = None,
) -> RunOutcome:
    """One run recorded to the store; a stop signal (`signals`, installed by the caller)
    kills it, and a second one abandons it (`RecordedRun.abandon`). `trace` builds the run's
    spans as its events come."""
    from loopdeck.operator.session import RunSession

    if options.acp is None:  # an env folder that is not there: said before a store is made
        from loopdeck.operator.launch import resolve_env_dir

        resolve_env_dir(options.env, options.settings)
    session = RunSession(db or default_db_path(), say=_say)
    async with session.opened() as store:
        # Before it is prepared, so nothing says "started" of a run that will not be.
        await session.refuse_taken_id(options.run_id)
        prepared = session.prepare(options)
        if trace is not None:
            prepared.runtime.bus.subscribe(trace.take)
        try:
            run_id = prepared.runtime.config.run_id

            def started() -> None:
                """Said once the store has the run (its start committed), so another terminal
                can attach, approve or stop it by id: a command sent earlier found no run."""
                print(
                    f"run {run_id} started · watch: loopdeck attach {run_id} --db {store.path}",
                    file=sys.stderr,
                )
                if options.approve == "wait":
                    print(
                        f"run {run_id}: writes wait for `loopdeck approve {run_id} CALL_ID` "
                        f"(db {store.path})",
                        file=sys.stderr,
                    )

            session.on_recorded = started
            if signals is not None:
                signals.aim(session.kill, lambda by: _harder(session, by))
            return await session.record()
        finally:
            session.cleanup()


def live_trace(args: argparse.Namespace) -> LiveTrace | None:
    """`--otlp URL`, else the OpenTelemetry variables' endpoint: the run's trace, built and
    sent as it runs (the OpenTelemetry SDK imported only then)."""
    url = args.otlp or otlp_from_environment()
    if not url and args.otlp_content:
        raise BadTraceEndpoint("--otlp-content goes with --otlp URL")
    if not url:
        return None
    from loopdeck.operator.otel_export import LiveTrace

    return LiveTrace(url, content=args.otlp_content)


def otlp_from_environment() -> str | None:
    """`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with
    `v1/traces` put on its path, as the OpenTelemetry SDKs read them; a value that is no
    http(s) URL is refused in words naming the variable."""
    from loopdeck.cli.parser import otlp_url

    for name, suffix in (("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
                         ("OTEL_EXPORTER_OTLP_ENDPOINT", "v1/traces")):  # fmt: skip
        value = os.environ.get(name, "").strip()
        if not value:
            continue
        try:
            url = otlp_url(value)
        except argparse.ArgumentTypeError as exc:
            raise BadTraceEndpoint(f"{name} {exc}") from None
        return url.rstrip("/") + "/" + suffix if suffix else url
    return None


class BadTraceEndpoint(Exception):
    """An OpenTelemetry variable that names no endpoint loopdeck can send to."""


def send_trace(trace: LiveTrace, run_id: str, db: Location | None = None) -> None:
    """The stopped run's trace sent, said on stderr (stdout's last line stays the run's);
    a failure is said with the command that sends it again (with the run's `--db`, a URL's
    password left out), and the run's exit stands."""
    import shlex

    from loopdeck.core.text import visible
    from loopdeck.operator.otel_export import ExportFailed, shown
    from loopdeck.store.base import shown_location

    try:
        sent = trace.send()
    except ExportFailed as exc:
        again = f"loopdeck export {run_id} --otlp {shown(trace.url)}"
        if db is not None:
            again += f" --db {shlex.quote(shown_location(db))}"
        print(f"loopdeck: {visible(str(exc))}; send it later with `{again}`", file=sys.stderr)
        return
    print(f"trace {sent.trace_id}: {sent.spans} spans sent to {sent.endpoint}", file=sys.stderr)


def _say(message: str) -> None:
    """What the recording has to say (spills brought back, events it could not save)."""
    print(f"loopdeck: {message}", file=sys.stderr)


def _harder(session: RunSession, by: str) -> None:
    if not session.abandon(by):
        print(f"loopdeck: {by}: the run has stopped; its last events are being written",
              file=sys.stderr)  # fmt: skip


def run_console(args: argparse.Namespace) -> int:
    """The console paints first; the run is prepared behind that frame (`LoopdeckApp`'s
    `prepare`). What stops the preparation is reported here once the console is gone."""
    from loopdeck.operator.approving import refusal
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp

    if args.command == "acp" and acp_command.refused(args):
        return EXIT_BAD_INPUT
    if (refused := refusal(args.approve, console=True)) is not None:
        print(f"loopdeck: {refused}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        trace = live_trace(args)
    except BadTraceEndpoint as exc:
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if refused_without_terminal(args.command):
        return EXIT_BAD_INPUT
    tuning.for_console()
    traced: list[str] = []  # the run whose trace `trace` builds, once it is prepared
    location = args.db or default_db_path()
    made: list[str] = []  # the store the preparation made, if it made one

    def prepare() -> RunSession:
        from loopdeck.operator.records import check_store
        from loopdeck.operator.session import RunSession
        from loopdeck.tui.console_start import tell_store_made

        said = made_store(location)
        asyncio.run(check_store(args.db))
        if said:  # made there only now: said as `loopdeck console` says it
            made.extend(said)
            app.call_from_thread(tell_store_made, app, said)
        session = RunSession(location, console=True)
        chosen = options(args)
        chosen.phase = lambda words: app.call_from_thread(app.preparing_phase, words)
        prepared = session.prepare(chosen)
        if trace is not None:
            prepared.runtime.bus.subscribe(trace.take)
            traced.append(prepared.runtime.config.run_id)
        return session

    app = LoopdeckApp(
        ConsoleStart.for_preparing(prepare, _about(args), location),
        theme_name=args.theme,
    )
    code = app.run()
    if app.launch_error is not None:
        for words in made:  # its toast went with the console: said where it stays
            print(f"loopdeck: {words}", file=sys.stderr)
        raise app.launch_error
    code = after_console(app, code)
    if trace is not None and traced:
        send_trace(trace, traced[0], args.db)
    return code


def _about(args: argparse.Namespace) -> str:
    """The run being prepared, in words, for the console's first frame."""
    if args.command == "acp":
        return acp_command.about(args)
    if args.command == "gateway":
        from loopdeck.cli.gateway_command import about as gateway_about

        return gateway_about(args)
    return f"run {args.env}" + (f" --script {args.script}" if args.script else "")


def launcher(args: argparse.Namespace) -> int:
    if refused_without_terminal("console"):
        return EXIT_BAD_INPUT
    from loopdeck.operator.records import check_store
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp

    location = args.db or default_db_path()
    said = made_store(location)
    asyncio.run(check_store(args.db))
    tuning.for_console()
    notify, started = notify_settings(args), None  # what a run started here takes
    if notify.on:  # the run's imports only then: the fleet paints before them
        from loopdeck.operator.launch import RunOptions

        started = RunOptions(env="", notify=notify)
    app = LoopdeckApp(ConsoleStart.for_fleet(location, started, said), theme_name=args.theme)
    app.bell_enabled = not args.no_bell
    return after_console(app, app.run())


def after_console(app: LoopdeckApp, code: int | None) -> int:
    """The console is gone: say what became of the run, in one line, and exit 0 on a quit,
    the app's return code otherwise (1: the console failed). What is said names outside text
    (a theme's path, the run's words): shown `visible`."""
    from loopdeck.core.text import visible

    for problem in app.theme_problems:
        print(f"loopdeck: {visible(str(problem))}", file=sys.stderr)
    if app.farewell:
        print(visible(str(app.farewell)))
    if app.return_code:
        return app.return_code
    return 0 if code is None else code
