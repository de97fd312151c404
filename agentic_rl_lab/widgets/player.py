"""`EnvironmentPlayer(env, seed)`: be the agent. One form per tool, the hidden state behind a toggle
(notebook 01)."""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as widgets

from agentic_rl_lab.envs.base import Environment, Message, tool_call_message
from agentic_rl_lab.widgets._html import message_html


def _field_for(name: str, schema: dict[str, Any]) -> widgets.Widget:
    """An input widget for one tool argument, chosen from its JSON schema."""
    if "enum" in schema:
        return widgets.Dropdown(options=schema["enum"], description=name)
    if schema.get("type") == "integer":
        return widgets.IntText(description=name)
    if schema.get("type") == "array":
        return widgets.Text(description=name, placeholder="comma, separated")
    return widgets.Text(description=name)


class EnvironmentPlayer:
    """Play an environment by hand. `player.widget` is the UI; `player.call(tool, **arguments)` does the same
    as filling a form and pressing its button, for scripts and tests."""

    def __init__(self, env: Environment, seed: int = 0) -> None:
        self.env = env
        self.history: list[Message] = env.reset(seed)
        self.chat = widgets.HTML()
        self.hidden = widgets.HTML()
        self.reveal = widgets.ToggleButton(description="reveal hidden state", value=False, icon="eye")
        self.reveal.observe(lambda _: self._render(), names="value")
        self.forms = [self._form(tool.schema()["function"]) for tool in env.tools]
        self.widget = widgets.VBox([*self.forms, self.chat, self.reveal, self.hidden])
        self._render()

    def _form(self, function: dict[str, Any]) -> widgets.Widget:
        properties = function["parameters"].get("properties", {})
        fields = {name: _field_for(name, schema) for name, schema in properties.items()}
        button = widgets.Button(description=function["name"], button_style="primary")

        def on_click(_: Any) -> None:
            arguments = {}
            for name, field in fields.items():
                value = field.value
                if properties[name].get("type") == "array":
                    value = [part.strip() for part in value.split(",") if part.strip()]
                arguments[name] = value
            self.call(function["name"], **arguments)

        button.on_click(on_click)
        return widgets.HBox([button, *fields.values()])

    def call(self, tool: str, **arguments: Any) -> list[Message]:
        """Send one tool call as the agent's action; return the observation."""
        if self.env.done:
            return []
        action = tool_call_message(tool, arguments, call_id=f"call_{self.env.turn}")
        result = self.env.step(action)
        self.history += [action, *result.observation]
        self._render()
        return result.observation

    def _render(self) -> None:
        status = f"<i>turn {self.env.turn}/{self.env.max_turns}{' — episode over' if self.env.done else ''}</i>"
        self.chat.value = "".join(message_html(m) for m in self.history) + status
        if self.reveal.value or self.env.done:
            state = json.dumps(self.env.hidden_state(), default=str, indent=1)
            outcome = f"<br><b>outcome</b>: {html.escape(str(self.env.outcome()))}" if self.env.done else ""
            self.hidden.value = (
                f"<b>hidden state</b> (never shown to the agent):<pre>{html.escape(state)}</pre>{outcome}"
            )
        else:
            self.hidden.value = "<i>hidden state concealed: the agent never sees it</i>"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
