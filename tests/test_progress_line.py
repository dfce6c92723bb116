import io

from nanomem.cli.progress_line import CLEAR, ProgressLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_one_line_rewritten_in_place_and_cleared_at_the_end() -> None:
    screen = Terminal()
    line = ProgressLine(screen, "dream")
    line("reading 2 history entries")
    line("analysing")
    line.clear()
    assert screen.getvalue() == (
        f"{CLEAR}dream: reading 2 history entries…{CLEAR}dream: analysing…{CLEAR}"
    )
    assert "\n" not in screen.getvalue()


def test_elsewhere_each_phase_is_a_line_of_its_own() -> None:
    log = io.StringIO()
    line = ProgressLine(log, "dream")
    line("reading 1 history entry")
    line("committing")
    line.clear()
    assert log.getvalue() == "dream: reading 1 history entry\ndream: committing\n"
