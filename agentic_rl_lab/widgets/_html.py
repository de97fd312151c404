"""The HTML pieces every viewer shares: chat bubbles (`message_html`), inline bars, colours, and the static
`text/html` copy that travels with each widget, so GitHub and nbviewer, where widgets are not live, still show the
view. Used by all the viewers of this package, never directly by a notebook.
"""

from __future__ import annotations

import html
import math
from typing import Any

import ipywidgets as widgets

from agentic_rl_lab.envs.base import Message

ROLE_COLOURS = {"system": "#eeeeee", "user": "#dbeafe", "assistant": "#dcfce7", "tool": "#fef3c7"}
POSITIVE, NEGATIVE = "#2563eb", "#dc2626"
"""Diverging colours for advantages and ratios: blue above the neutral value, red below."""
TEXT = "<div style='line-height:1.4'>{}</div>"
"""Wraps the HTML of a view: ipywidgets' `HTML` sets a line height for one-line labels, far too tall for text."""


def message_html(message: Message) -> str:
    """One message as a chat bubble: role, text, and any tool calls set apart in monospace. A tool result is
    indented under the call it answers, in monospace, so actions and observations never blur together."""
    role = message.get("role", "?")
    parts = [f"<b>{html.escape(role)}</b>"]
    if role == "tool":
        parts.append(f"<small>↳ result of {html.escape(str(message.get('tool_call_id', '?')))}</small><br>")
        parts.append(f"<code style='white-space:pre-wrap'>{html.escape(str(message.get('content', '')))}</code>")
    elif message.get("content"):
        parts.append(html.escape(str(message["content"])))
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        text = f"{function.get('name')}({function.get('arguments')})"
        parts.append(f"<code style='background:#fff;padding:1px 4px'>→ {html.escape(str(text))}</code>")
    indent = "margin:3px 0 3px 2em" if role == "tool" else "margin:3px 0"
    style = f"background:{ROLE_COLOURS.get(role, '#f5f5f5')};border-radius:8px;padding:4px 8px;{indent}"
    return f"<div class='arl-bubble arl-{html.escape(role)}' style='{style}'>{' '.join(parts)}</div>"


def _with_static_html(widget: widgets.Widget, static_html: str, **kwargs: Any) -> dict[str, Any]:
    """The widget's display bundle plus a static `text/html` copy. A live frontend renders the widget; GitHub and
    nbviewer cannot, and show the HTML instead."""
    bundle = widget._repr_mimebundle_(**kwargs)
    bundle["text/html"] = static_html
    return bundle


def _format(value: float | None, spec: str = ".3f") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _blend(colour: str, strength: float) -> str:
    """`colour` mixed into white: strength 0 gives white, 1 the colour itself."""
    strength = min(1.0, max(0.0, strength))
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 + (c - 255) * strength):02x}" for c in rgb)


def _bar(value: float | None, colour: str, scale: float = 1.0, label: str = "") -> str:
    """An inline horizontal bar, `value / scale` of a 100px track."""
    width = 0 if value is None or math.isnan(value) else round(100 * min(1.0, max(0.0, value / scale)))
    track = "display:inline-block;width:100px;height:10px;background:#f3f4f6;vertical-align:middle"
    fill = f"display:block;width:{width}px;height:10px;background:{colour}"
    return f"<span style='{track}'><span style='{fill}'></span></span> {label}"


def _diverging_bar(value: float | None, scale: float) -> str:
    """An inline bar centred on 0: right and blue when positive, left and red when negative."""
    if value is None or math.isnan(value):
        return "—"
    half = round(60 * min(1.0, abs(value) / scale)) if scale > 0 else 0
    left = 60 - half if value < 0 else 60
    colour = NEGATIVE if value < 0 else POSITIVE
    track = "position:relative;display:inline-block;width:120px;height:10px;background:#f3f4f6;vertical-align:middle"
    fill = f"position:absolute;left:{left}px;width:{half}px;height:10px;background:{colour}"
    axis = "position:absolute;left:60px;width:1px;height:10px;background:#111"
    return f"<span style='{track}'><span style='{fill}'></span><span style='{axis}'></span></span> {value:+.2f}"
