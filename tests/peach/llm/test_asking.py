"""The terminal approver of ``strabo agent`` (peach/llm/_asking.py): a line typed
after its question was given up on approves nothing, and questions are asked
one at a time. The terminal is a queue of lines read in a thread, as stdin is."""

from __future__ import annotations

import asyncio
import queue

import pytest

from peach.llm._asking import Terminal


class Typist:
    """Lines the principal types, whenever the test says."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.shown: list[str] = []

    def readline(self) -> str:
        return self.lines.get(timeout=30)

    def type(self, line: str) -> None:
        self.lines.put(line + "\n")

    async def sees(self, text: str) -> None:
        """Let the loop run until ``text`` is on the screen (ask() prints it on
        its first steps: no timer is waited on)."""
        for _ in range(1000):
            if text in self.shown:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"{text!r} never shown: {self.shown}")


async def test_a_question_gets_the_line_typed_after_it() -> None:
    typist = Typist()
    terminal = Terminal(typist.readline, typist.shown.append)
    asking = asyncio.create_task(terminal.ask("Approve? "))
    typist.type("y")
    assert await asking == "y"
    assert typist.shown == ["Approve? "]


async def test_an_answer_to_a_question_given_up_on_answers_nothing_else() -> None:
    typist = Typist()
    terminal = Terminal(typist.readline, typist.shown.append)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):  # the adapter's approve_timeout, shortened
            await terminal.ask("Approve Create? ")
    reading = terminal._read
    assert reading is not None and not reading.done()  # the thread still waits in readline
    typist.type("y")  # the principal answers the expired question
    await asyncio.wait([reading])
    asking = asyncio.create_task(terminal.ask("Approve Complete? "))
    await typist.sees("Approve Complete? ")
    typist.type("n")
    assert await asking == "n"  # not the "y" meant for Create
    assert typist.shown == [
        "Approve Create? ",
        "(ignored 'y': its question was no longer waiting)\n",
        "Approve Complete? ",
    ]


async def test_a_line_typed_while_a_later_question_waits_answers_that_question() -> None:
    """The read outlives its question; the next question, on screen when the
    line comes, takes it."""
    typist = Typist()
    terminal = Terminal(typist.readline, typist.shown.append)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await terminal.ask("Approve Create? ")
    asking = asyncio.create_task(terminal.ask("Approve Complete? "))
    await typist.sees("Approve Complete? ")
    typist.type("yes")
    assert await asking == "yes"


async def test_two_questions_at_once_are_asked_one_after_the_other() -> None:
    typist = Typist()
    terminal = Terminal(typist.readline, typist.shown.append)
    first = asyncio.create_task(terminal.ask("First? "))
    second = asyncio.create_task(terminal.ask("Second? "))
    await typist.sees("First? ")
    assert "Second? " not in typist.shown  # not asked while the first waits
    typist.type("y")
    assert await first == "y"
    await typist.sees("Second? ")
    assert not second.done()  # the one "y" did not answer it
    typist.type("n")
    assert await second == "n"


async def test_the_end_of_input_is_an_empty_answer() -> None:
    terminal = Terminal(lambda: "", lambda _: None)
    assert await terminal.ask("Approve? ") == ""
