"""`fog_maze`: find the exit of a maze in thick fog, seeing only the cells next to you, with the tool `move`.

The classic POMDP lesson. The hidden state is the map and the agent's position on it; an observation is only
the local view: which of north, east, south and west are open, and whether the exit is one of those cells:

    opening: "Find the exit. open: east, south"
    move:    "moved south. open: north, west. exit: west"  |  "wall: you stay. open: north, west"  |  "exit reached"

Two corridors can look exactly alike, so no policy that reads only the latest observation can tell "I have
been here" from "this is new". A memoryless policy can only wander; a policy that dead-reckons its position
from its own past moves (the history *is* its state) can explore depth-first and always finds the exit.
Even so, no policy can be sure of walking the shortest path without seeing the map: the expert's score below 1
is the price of the fog.
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

from agentic_rl_lab.envs.base import (
    Environment,
    InvalidAction,
    Message,
    Outcome,
    Tool,
    ToolArguments,
    tool_call_message,
    tool_exchanges,
)

Cell = tuple[int, int]
"""A cell as `(x, y)`: x is the column (grows east), y the row (grows south). Never shown to the agent."""

DIRECTIONS = ("north", "east", "south", "west")
"""Compass order: views always list open directions in this order, so observations are regular."""
STEP = {"north": (0, -1), "east": (1, 0), "south": (0, 1), "west": (-1, 0)}
OPPOSITE = {"north": "south", "east": "west", "south": "north", "west": "east"}


def neighbour(cell: Cell, direction: str) -> Cell:
    """The cell one step from `cell` in `direction`."""
    dx, dy = STEP[direction]
    return cell[0] + dx, cell[1] + dy


class MoveArguments(ToolArguments):
    direction: Literal["north", "east", "south", "west"]


class FogMaze(Environment):
    """A perfect maze (exactly one path between any two cells) of `width` x `height` cells; each move is one turn.

    The start is a random corner and the exit is the cell farthest from it along the maze's paths. By default
    `max_turns` is the most moves depth-first exploration can ever need, 2 * (cells - 1) - (width + height - 2),
    which is 40 on a 5 x 5 maze: every passage is walked at most twice, and the ones on the way to the exit (at
    least width + height - 2 of them) only once.
    """

    name = "fog_maze"

    def __init__(self, width: int = 5, height: int = 5, max_turns: int | None = None) -> None:
        if width < 2 or height < 2:
            raise ValueError(f"a maze needs at least 2 x 2 cells, got width={width}, height={height}")
        if max_turns is None:
            max_turns = 2 * (width * height - 1) - (width + height - 2)
        super().__init__(max_turns)
        self.width, self.height = width, height
        description = "Move one cell north, east, south or west. Walking into a wall wastes the turn."
        self.tools = [Tool("move", description + " One move per turn.", MoveArguments)]

    # ----- the hidden state ---------------------------------------------------------------------------------
    def setup(self, rng: random.Random) -> list[Message]:
        corners = [(0, 0), (self.width - 1, 0), (0, self.height - 1), (self.width - 1, self.height - 1)]
        self.start = rng.choice(corners)
        self.open_sides = self._carve(self.start, rng)
        distances = self._distances(self.start)
        farthest = max(distances.values())
        self.exit = rng.choice(sorted(cell for cell, d in distances.items() if d == farthest))
        self.shortest_path_length = farthest
        self.position = self.start
        self.visited = {self.start}
        self.found = False
        self._last_move_turn = 0
        return [
            {
                "role": "system",
                "content": "You are in a maze, in thick fog: you see only the cells next to you. "
                "Call the tool move with a direction: north, east, south or west.",
            },
            {"role": "user", "content": f"Find the exit. {self._view()}"},
        ]

    def _carve(self, start: Cell, rng: random.Random) -> dict[Cell, set[str]]:
        """A perfect maze by the recursive backtracker: walk to a random unvisited neighbour, knocking down the
        wall between; at a dead end, back up until a cell has one. Returns each cell's open directions."""
        open_sides: dict[Cell, set[str]] = {(x, y): set() for x in range(self.width) for y in range(self.height)}
        stack, carved = [start], {start}
        while stack:
            cell = stack[-1]
            choices = [d for d in DIRECTIONS if neighbour(cell, d) in open_sides and neighbour(cell, d) not in carved]
            if not choices:
                stack.pop()
                continue
            direction = rng.choice(choices)
            nxt = neighbour(cell, direction)
            open_sides[cell].add(direction)
            open_sides[nxt].add(OPPOSITE[direction])
            carved.add(nxt)
            stack.append(nxt)
        return open_sides

    def _distances(self, source: Cell) -> dict[Cell, int]:
        """Breadth-first search: the length of the path from `source` to every cell."""
        distances, queue = {source: 0}, deque([source])
        while queue:
            cell = queue.popleft()
            for direction in sorted(self.open_sides[cell]):
                nxt = neighbour(cell, direction)
                if nxt not in distances:
                    distances[nxt] = distances[cell] + 1
                    queue.append(nxt)
        return distances

    def _view(self) -> str:
        """What the agent sees from where it stands: the open directions, and the exit if it is next door."""
        sides = [d for d in DIRECTIONS if d in self.open_sides[self.position]]
        view = "open: " + ", ".join(sides)
        exit_side = next((d for d in sides if neighbour(self.position, d) == self.exit), None)
        return view + (f". exit: {exit_side}" if exit_side else "")

    # ----- the tool -----------------------------------------------------------------------------------------
    def call_tool(self, name: str, arguments: Any) -> tuple[str, bool]:
        if self._last_move_turn == self.turn:
            # Several moves in one message would make turns and moves disagree, and the score counts turns.
            raise InvalidAction("one move per turn: this move was not made; look at the reply to the first one.")
        self._last_move_turn = self.turn
        direction = arguments.direction
        if direction not in self.open_sides[self.position]:
            return f"wall: you stay. {self._view()}", False
        self.position = neighbour(self.position, direction)
        self.visited.add(self.position)
        if self.position == self.exit:
            self.found = True
            return "exit reached", True
        return f"moved {direction}. {self._view()}", False

    def outcome(self) -> Outcome:
        """Success is reaching the exit. The score is shortest path / turns used: 1 only for walking straight to
        the exit, which needs luck in the fog, so even the expert's mean score stays below 1. Every turn counts,
        wall bumps and bad actions included; `min` keeps the score in [0, 1]."""
        score = min(1.0, self.shortest_path_length / self.turn) if self.found else 0.0
        return Outcome(success=self.found, num_steps=self.turn, score=score)

    def hidden_state(self) -> dict[str, Any]:
        passages = sorted((cell, neighbour(cell, d)) for cell, sides in self.open_sides.items() for d in sides)
        return {
            "width": self.width,
            "height": self.height,
            "start": self.start,
            "exit": self.exit,
            "position": self.position,
            "visited": sorted(self.visited),
            "passages": [(a, b) for a, b in passages if a < b],
            "shortest_path_length": self.shortest_path_length,
            "render": self.render(),
        }

    # ----- pictures for teaching: the hidden truth, and what the agent has seen of it ------------------------
    def render(self) -> str:
        """The whole map in ASCII: `@` the agent, `S` the start, `E` the exit, `.` cells visited."""
        return self._draw(lambda cell: True)

    def render_seen(self) -> str:
        """The map as far as the agent has seen it: walls around the cells it has visited, the rest fog (`~`).
        The exit shows once the agent has stood next to it, as the view then said where it was."""
        return self._draw(lambda cell: cell in self.visited)

    def _draw(self, known: Callable[[Cell], bool]) -> str:
        """Draw the maze; a wall shows only if a cell on either side of it is `known`."""
        beside_exit = (neighbour(self.exit, d) for d in self.open_sides[self.exit])
        exit_seen = known(self.exit) or any(cell in self.visited for cell in beside_exit)

        def label(cell: Cell) -> str:
            if cell == self.position:
                return " @ "
            if cell == self.exit and exit_seen:
                return " E "
            if not known(cell):
                return "~~~"
            return " S " if cell == self.start else " . " if cell in self.visited else "   "

        def edge(cell: Cell, direction: str, wall: str) -> str:
            other = neighbour(cell, direction)
            if not (known(cell) or (other in self.open_sides and known(other))):
                return "~" * len(wall)
            return " " * len(wall) if direction in self.open_sides[cell] else wall

        lines = []
        for y in range(self.height):
            row = [(x, y) for x in range(self.width)]
            lines.append("+" + "+".join(edge(cell, "north", "---") for cell in row) + "+")
            lines.append(edge(row[0], "west", "|") + "".join(label(cell) + edge(cell, "east", "|") for cell in row))
        bottom = [(x, self.height - 1) for x in range(self.width)]
        lines.append("+" + "+".join(edge(cell, "south", "---") for cell in bottom) + "+")
        return "\n".join(lines)


# ----- scripted policies: each reads what it knows out of the history, the agent's only state ----------------
def read_view(text: str) -> tuple[list[str], str | None]:
    """Parse a local view like "moved east. open: north, west. exit: west" into (open directions, exit side)."""
    found = re.search(r"open: ([a-z, ]*)", text)
    sides = [w.strip() for w in found.group(1).split(",") if w.strip() in STEP] if found else []
    exit_side = re.search(r"exit: ([a-z]+)", text)
    return sides, exit_side.group(1) if exit_side and exit_side.group(1) in STEP else None


def latest_view(history: list[Message]) -> tuple[list[str], str | None]:
    """The most recent local view in the history (error replies carry none, and leave the agent in place)."""
    for message in reversed(history):
        content = message.get("content")
        if message.get("role") in ("user", "tool") and isinstance(content, str) and "open: " in content:
            return read_view(content)
    return list(DIRECTIONS), None


def moved_direction(reply: str) -> str | None:
    """The direction of a move that was made, read from its reply ("moved east. open: ..."), else None."""
    found = re.match(r"moved ([a-z]+)\.", reply)
    return found.group(1) if found and found.group(1) in STEP else None


def dead_reckoning(history: list[Message]) -> tuple[Cell, dict[Cell, tuple[list[str], str | None]]]:
    """Rebuild a map from the history alone: the agent's position relative to where it started (the start is
    (0, 0) here; the agent never sees real coordinates) and the view it had at every cell it has stood on."""
    opening = next((m["content"] for m in history if m.get("role") == "user"), "")
    position: Cell = (0, 0)
    views = {position: read_view(opening)}
    for name, _, reply in tool_exchanges(history):
        if name != "move" or not reply.startswith(("moved ", "wall: ")):
            continue  # error replies: the move was not made
        direction = moved_direction(reply)
        if direction:
            position = neighbour(position, direction)
        views[position] = read_view(reply)
    return position, views


def _move(direction: str, history: list[Message]) -> Message:
    return tool_call_message("move", {"direction": direction}, f"call_{len(history)}")


def expert(history: list[Message], rng: random.Random) -> Message:
    """Depth-first exploration on the dead-reckoned map: step into the exit if it is in view, else into an
    unexplored passage, else walk back to the nearest cell that still has one. On a perfect maze this walks
    every passage at most twice, so it always finds the exit within the default `max_turns`."""
    position, views = dead_reckoning(history)
    sides, exit_side = views[position]
    if exit_side:
        return _move(exit_side, history)
    unexplored = [d for d in sides if neighbour(position, d) not in views]
    if unexplored:
        return _move(rng.choice(unexplored), history)
    # Backtrack: breadth-first search over the passages seen so far to the nearest cell with an unexplored one.
    first_step: dict[Cell, str] = {position: ""}
    queue = deque([position])
    while queue:
        cell = queue.popleft()
        if any(neighbour(cell, d) not in views for d in views[cell][0]):
            return _move(first_step[cell], history)
        for direction in views[cell][0]:
            nxt = neighbour(cell, direction)
            if nxt in views and nxt not in first_step:
                first_step[nxt] = first_step[cell] or direction
                queue.append(nxt)
    return _move(rng.choice(sides or list(DIRECTIONS)), history)  # nothing left to explore: cannot happen


def mediocre(history: list[Message], rng: random.Random) -> Message:
    """A random walk with one step of memory: it takes the exit when it sees it and never turns back unless at a
    dead end. Finds the exit in about two thirds of 5 x 5 episodes: a demonstrator that leaves GRPO headroom."""
    sides, exit_side = latest_view(history)
    if exit_side:
        return _move(exit_side, history)
    moves = [moved_direction(reply) for _, _, reply in tool_exchanges(history)]
    made = [direction for direction in moves if direction]
    back = OPPOSITE[made[-1]] if made else None
    forward = [d for d in sides if d != back]
    return _move(rng.choice(forward or sides), history)


def random_valid(history: list[Message], rng: random.Random) -> Message:
    """A valid move every turn, with no memory: any direction the latest view says is open."""
    sides, _ = latest_view(history)
    return _move(rng.choice(sides or list(DIRECTIONS)), history)


FogMaze.strategies = {"random": random_valid, "mediocre": mediocre, "expert": expert}
