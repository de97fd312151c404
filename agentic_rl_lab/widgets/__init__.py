"""Interactive views for notebooks (ipywidgets). Look rather than read.

| viewer | what it shows | used in |
| --- | --- | --- |
| `EnvironmentPlayer(env, seed)` | be the agent: one form per tool, the hidden state behind a toggle | 01 |
| `TrajectoryViewer(groups)` | chat bubbles; what the agent saw against the hidden truth; reward, advantage | 01, 02 |
| `GroupScoreboard(group)` | per member: judge score against ground truth, rank, advantage, length, permutations | 03 |
| `TokenView(trajectory, tokenizer)` | each token of the training sequence: loss mask, advantage or ratio | 04 |
| `TrainingDashboard()` | live plots of a GRPO run: `GRPOTrainer(..., callbacks=[dashboard])` | 05 |

Each viewer has a module of its own: `player.py` (EnvironmentPlayer), `trajectories.py` (TrajectoryViewer, with
`replay` and `advantages_by_member`), `scoreboard.py` (GroupScoreboard), `tokens.py` (TokenView) and `dashboard.py`
(TrainingDashboard). `_html.py` holds what they share: chat bubbles (`message_html`), inline bars, colours, and the
static `text/html` copy. Import the viewers from here: `from agentic_rl_lab.widgets import TrajectoryViewer`.

How to use any of them:
- Put the viewer last in a cell (or `display(viewer)`). `viewer.widget` is its ipywidgets tree.
- `viewer.to_html()` is a static rendering. It travels with the widget as `text/html`, so GitHub, nbviewer and
  CI logs, where widgets are not live, still show the view as it was when the cell ran.
- Each class docstring lists the attributes that hold its state (`num_bubbles`, `colours`, `rows`...): tests and
  exercises assert on them instead of on pixels.

`agentic_rl_lab.grpo` imports torch and `agentic_rl_lab.judge` an HTTP client, so the viewers import them when they
need them, and `import agentic_rl_lab.widgets` stays quick.
"""

from agentic_rl_lab.widgets._html import NEGATIVE, POSITIVE, ROLE_COLOURS, TEXT, message_html
from agentic_rl_lab.widgets.dashboard import TrainingDashboard
from agentic_rl_lab.widgets.player import EnvironmentPlayer
from agentic_rl_lab.widgets.scoreboard import GroupScoreboard
from agentic_rl_lab.widgets.tokens import MASK_COLOURS, MASK_UNDERLINE, TokenView
from agentic_rl_lab.widgets.trajectories import MAP_STYLE, TrajectoryViewer, advantages_by_member, replay

__all__ = [
    "MAP_STYLE",
    "MASK_COLOURS",
    "MASK_UNDERLINE",
    "NEGATIVE",
    "POSITIVE",
    "ROLE_COLOURS",
    "TEXT",
    "EnvironmentPlayer",
    "GroupScoreboard",
    "TokenView",
    "TrainingDashboard",
    "TrajectoryViewer",
    "advantages_by_member",
    "message_html",
    "replay",
]
