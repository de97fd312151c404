"""`TokenView(trajectory, tokenizer)`: what the loss sees. Each token of the training sequence, coloured by the
loss mask, the advantage or the probability ratio (notebook 04).

`agentic_rl_lab.grpo` imports torch, so the view imports it when it is built.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from agentic_rl_lab.trajectory import Trajectory
from agentic_rl_lab.widgets._html import NEGATIVE, POSITIVE, TEXT, _blend, _with_static_html

MASK_COLOURS = {"context": "#e5e7eb", "assistant": "#86efac"}
"""TokenView's loss-mask colours: grey for context (no loss), green for the sampled tokens that are trained."""
MASK_UNDERLINE = "#16a34a"


class TokenView:
    """Every token of a trajectory's training sequence (`grpo.tensors.trajectory_to_sequence`), coloured by the
    loss mask: green where the policy sampled the token (a loss is taken), grey on context (system, user, tool
    and template tokens, never trained on).

    `advantages`: one number for the whole trajectory, one per assistant turn, one per assistant token, or one
    per token of the sequence. `ratios`: probability ratios π_θ/π_old after an update, one per assistant token or
    one per token; tokens outside [1 - epsilon, 1 + epsilon] (where clipping can act) get a black outline. Both
    colour only assistant tokens: context keeps its grey, because it has no loss to weight.

    State: `tokens` (each token's text), `token_ids`, `mask` (the assistant mask), `turn`, `mode` ("loss mask",
    "advantage" or "ratio"), `values` (per token, None on context), `colours` (one CSS colour per token),
    `outlined` (ratio mode: outside the clip range). `show(mode)` switches the colouring.
    """

    def __init__(
        self,
        trajectory: Trajectory,
        tokenizer: Any,
        advantages: float | Sequence[float] | Any | None = None,
        ratios: Sequence[float] | Any | None = None,
        *,
        epsilon: float = 0.2,
        mode: str | None = None,
    ) -> None:
        from agentic_rl_lab.grpo.tensors import trajectory_to_sequence  # imports torch

        sequence = trajectory_to_sequence(trajectory, tokenizer)
        self.token_ids = list(sequence.input_ids)
        self.mask = list(sequence.assistant_mask)
        self.turn = list(sequence.turn)
        self.tokens = [tokenizer.decode([token_id]) for token_id in self.token_ids]
        self.epsilon = epsilon
        self.layers: dict[str, list[float | None] | None] = {"loss mask": None}
        if advantages is not None:
            self.layers["advantage"] = self._per_token(advantages, "advantages", per_turn=True)
        if ratios is not None:
            self.layers["ratio"] = self._per_token(ratios, "ratios", per_turn=False)
        mode = mode or list(self.layers)[-1]
        self.picker = widgets.ToggleButtons(options=list(self.layers), value=mode, description="colour by")
        self.picker.observe(lambda change: self.show(change["new"]), names="value")
        self.legend = widgets.HTML()
        self.text = widgets.HTML(layout=widgets.Layout(max_height="420px", overflow="auto"))
        self.widget = widgets.VBox([self.picker, self.legend, self.text])
        self.widget.add_class("arl-token-view")
        self.show(mode)

    def _per_token(self, values: Any, name: str, per_turn: bool) -> list[float | None]:
        """Spread `values` over the tokens of the sequence: context tokens get None."""
        if hasattr(values, "tolist"):  # a tensor or an array
            values = values.tolist()
        if isinstance(values, (int, float)):
            values = [float(values)] * sum(self.mask)
        values = [float(v) for v in values]
        assistant = [i for i, m in enumerate(self.mask) if m]
        turns = max(self.turn) + 1
        if len(values) == len(self.tokens):
            return [v if m else None for v, m in zip(values, self.mask)]
        if len(values) == len(assistant):
            spread: list[float | None] = [None] * len(self.tokens)
            for i, v in zip(assistant, values):
                spread[i] = v
            return spread
        if per_turn and len(values) == turns:
            return [values[t] if m else None for t, m in zip(self.turn, self.mask)]
        expected = f"{len(self.tokens)} (every token) or {len(assistant)} (assistant tokens)"
        expected += f" or {turns} (assistant turns)" if per_turn else ""
        raise ValueError(f"got {len(values)} {name} for a sequence that needs {expected}")

    def show(self, mode: str) -> None:
        """Colour the tokens by "loss mask", "advantage" or "ratio" (the last two when given)."""
        if mode not in self.layers:
            raise ValueError(f"no {mode!r} colouring; this view has {list(self.layers)}")
        if self.picker.value != mode:
            self.picker.value = mode  # its observer calls show(mode) again, with the buttons in step
            return
        self.mode = mode
        self.values = self.layers[mode] or [None] * len(self.tokens)
        self.outlined = [False] * len(self.tokens)
        self.colours = []
        finite = [abs(v) for v in self.values if v is not None and math.isfinite(v)]
        scale = max(finite + [1e-9]) if mode == "advantage" else math.log1p(2 * self.epsilon)
        for i, (m, value) in enumerate(zip(self.mask, self.values)):
            if not m:
                self.colours.append(MASK_COLOURS["context"])
            elif mode == "advantage" and value is not None:
                self.colours.append(_blend(POSITIVE if value >= 0 else NEGATIVE, abs(value) / scale))
            elif mode == "ratio" and value is not None:
                log_ratio = math.log(max(value, 1e-12))
                self.colours.append(_blend(POSITIVE if log_ratio >= 0 else NEGATIVE, abs(log_ratio) / scale))
                self.outlined[i] = not 1 - self.epsilon <= value <= 1 + self.epsilon
            else:
                self.colours.append(MASK_COLOURS["assistant"])
        self.legend.value = TEXT.format(self._legend_html())
        self.text.value = self._tokens_html()

    def _legend_html(self) -> str:
        trained = sum(self.mask)
        swatch = "display:inline-block;width:12px;height:12px;vertical-align:middle;background:{}"
        context = f"<span style='{swatch.format(MASK_COLOURS['context'])}'></span> context: no loss"
        counts = f"{len(self.tokens)} tokens: {trained} trained (assistant), {len(self.tokens) - trained} context. "
        if self.mode == "loss mask":
            return counts + f"<span style='{swatch.format(MASK_COLOURS['assistant'])}'></span> trained · {context}"
        if self.mode == "advantage":
            return counts + f"blue: advantage > 0 (made more likely), red: < 0 (less likely) · {context}"
        return counts + (
            f"blue: ratio > 1, red: < 1; outlined: outside [{1 - self.epsilon:g}, {1 + self.epsilon:g}], "
            f"where clipping can act · {context}"
        )

    def _tokens_html(self) -> str:
        spans = []
        for i, (token, colour) in enumerate(zip(self.tokens, self.colours)):
            kind = "assistant" if self.mask[i] else "context"
            value = self.values[i]
            title = f"#{i} id={self.token_ids[i]} {kind}" + ("" if value is None else f" {self.mode}={value:.3f}")
            outline = "outline:2px solid #000;" if self.outlined[i] else ""
            if self.mask[i]:  # a green underline keeps the loss mask visible under every colouring
                outline += f"border-bottom:2px solid {MASK_UNDERLINE};"
            text = html.escape(token).replace("\n", "↵\n")
            spans.append(
                f"<span class='arl-token arl-{kind}' title='{html.escape(title)}' "
                f"style='background:{colour};{outline}border-radius:2px;margin:0 1px'>{text}</span>"
            )
        style = "font-family:monospace;font-size:12px;white-space:pre-wrap;line-height:1.7"
        return f"<div style='{style}'>{''.join(spans)}</div>"

    def to_html(self) -> str:
        return f"<div class='arl-token-view'><p>{self.legend.value}</p>{self.text.value}</div>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return _with_static_html(self.widget, self.to_html(), **kwargs)
