"""Pictures of attention weights, as the paper's figures 3-5 draw them, and as heat maps.

Both functions take the weights of one sentence, `[heads, query_length, key_length]` (one
row of `Transformer.attention_weights`), and return a matplotlib `Figure` (written to `path`
when one is given):

- `draw_attention_lines`: the paper's figures 3-5: the tokens in two columns, a line from
  each query token (left) to each key token (right), as opaque as its weight, one colour per
  head;
- `draw_attention_heatmaps`: one heat map per head, query tokens down, key tokens across,
  on one colour scale from 0 to 1 with its colour bar.

matplotlib is imported when a picture is drawn, not with this module, and only through its
object API (`matplotlib.figure.Figure`), so that drawing never changes the pyplot backend of
the program that calls it.
"""

import math
import os

import numpy as np

# Below this weight a line is left out: invisible anyway, and it would only slow drawing.
MIN_LINE_WEIGHT = 0.01


def _as_heads(weights, heads):
    """`weights` as a float array `[heads, query, key]` and the 0-based heads to draw."""
    weights = np.asarray(weights, dtype="float32")
    if weights.ndim != 3:
        raise ValueError(
            f"weights must be [heads, query_length, key_length] (one sentence), "
            f"got shape {weights.shape}"
        )
    heads = list(range(weights.shape[0])) if heads is None else list(heads)
    for head in heads:
        if not 0 <= head < weights.shape[0]:
            raise ValueError(
                f"head {head} is out of range: the weights have heads 0 .. {weights.shape[0] - 1}"
            )
    return weights, heads


def _check_tokens(weights, query_tokens, key_tokens):
    key_tokens = query_tokens if key_tokens is None else key_tokens
    if (len(query_tokens), len(key_tokens)) != weights.shape[1:]:
        raise ValueError(
            f"{len(query_tokens)} query and {len(key_tokens)} key tokens do not "
            f"match weights of shape {weights.shape} [heads, query, key]"
        )
    return list(query_tokens), list(key_tokens)


def _head_colours(count):
    """One distinct colour per head (tab10 up to 10 heads, tab20 up to 20, then a ramp)."""
    from matplotlib import colormaps

    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    if count <= 20:
        return [colormaps["tab20"](i) for i in range(count)]
    return [colormaps["hsv"](i / count) for i in range(count)]


def _save(figure, path):
    if path is not None:
        # Written beside and renamed: a kill mid-write leaves an earlier picture whole.
        from keras_transformer.files import atomic_write

        with atomic_write(path, "wb") as file:
            figure.savefig(file, dpi=120, format=os.path.splitext(path)[1][1:] or "png")
    return figure


def draw_attention_lines(
    weights, query_tokens, key_tokens=None, heads=None, query_index=None, title=None, path=None
):
    """The paper's figures 3-5: lines from query tokens (left) to key tokens (right).

    Each line is as opaque as its attention weight; each head has its own colour (the
    legend names them, 1-based as the paper counts). With several heads the lines of the
    heads overlap, as in the paper's figure 3.

    Args:
        weights: `[heads, query_length, key_length]` probabilities of one sentence.
        query_tokens: labels of the queries (left column).
        key_tokens: labels of the keys (right column); default: `query_tokens`
            (self-attention).
        heads: 0-based heads to draw; default: all.
        query_index: draw only the attention of this query (0-based), as the paper's figure 3
            does for "making"; default: every query.
        title: the figure's title.
        path: where to write the PNG; default: not written.

    Returns:
        The matplotlib `Figure`.

    Example:
    >>> weights = model.attention_weights(source_ids, layer_index=4)[0]  # layer 5 of 6
    >>> draw_attention_lines(weights, tokens, heads=[4, 5], path="anaphora.png")
    """
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    weights, heads = _as_heads(weights, heads)
    query_tokens, key_tokens = _check_tokens(weights, query_tokens, key_tokens)
    if query_index is not None and not 0 <= query_index < len(query_tokens):
        raise ValueError(f"query_index {query_index} is out of range: 0 .. {len(query_tokens) - 1}")
    queries = range(len(query_tokens)) if query_index is None else [query_index]
    rows = max(len(query_tokens), len(key_tokens))
    figure = Figure(figsize=(5.0, 1.4 + 0.28 * rows), layout="constrained")
    axis = figure.add_subplot()
    colours = _head_colours(weights.shape[0])
    for head in heads:
        segments, rgba = [], []
        for query in queries:
            for key, weight in enumerate(weights[head, query]):
                if weight >= MIN_LINE_WEIGHT:
                    segments.append([(0.0, query), (1.0, key)])
                    rgba.append(colours[head][:3] + (float(weight),))
        axis.add_collection(LineCollection(segments, colors=rgba, linewidths=2.0))
    for row, token in enumerate(query_tokens):
        bold = query_index is not None and row == query_index
        axis.text(
            -0.03,
            row,
            token,
            ha="right",
            va="center",
            fontsize=9,
            fontweight="bold" if bold else "normal",
        )
    for row, token in enumerate(key_tokens):
        axis.text(1.03, row, token, ha="left", va="center", fontsize=9)
    axis.set_xlim(-0.6, 1.6)
    axis.set_ylim(rows - 0.5, -0.5)  # first token on top
    axis.axis("off")
    figure.legend(
        handles=[
            Line2D([], [], color=colours[h], linewidth=3, label=f"head {h + 1}") for h in heads
        ],
        # Below the columns: at the upper right a long title ran into it.
        loc="outside lower center",
        ncols=min(len(heads), 4),
        fontsize=8,
        frameon=False,
    )
    if title:
        figure.suptitle(title, fontsize=10)
    return _save(figure, path)


def draw_attention_heatmaps(
    weights, query_tokens, key_tokens=None, heads=None, title=None, path=None, max_columns=4
):
    """One heat map per head, on one colour scale (0 to 1) shown by a colour bar.

    Args:
        weights: `[heads, query_length, key_length]` probabilities of one sentence.
        query_tokens: labels of the rows (queries).
        key_tokens: labels of the columns (keys); default: `query_tokens`.
        heads: 0-based heads to draw; default: all.
        title: the figure's title.
        path: where to write the PNG; default: not written.
        max_columns: panels per row.

    Returns:
        The matplotlib `Figure`.

    Example:
    >>> weights = model.cross_attention_weights(source_ids, target_input_ids)[0]
    >>> draw_attention_heatmaps(weights, target_tokens, source_tokens, path="attention.png")
    """
    from matplotlib.figure import Figure

    weights, heads = _as_heads(weights, heads)
    query_tokens, key_tokens = _check_tokens(weights, query_tokens, key_tokens)
    columns = min(len(heads), max_columns)
    rows = math.ceil(len(heads) / columns)
    panel_width = 1.2 + 0.22 * len(key_tokens)
    panel_height = 1.2 + 0.22 * len(query_tokens)
    figure = Figure(
        figsize=(columns * panel_width + 1.2, rows * panel_height + 0.6), layout="constrained"
    )
    axes = figure.subplots(rows, columns, squeeze=False)
    image = None
    for panel, axis in enumerate(axes.flat):
        if panel >= len(heads):
            axis.set_visible(False)
            continue
        head = heads[panel]
        image = axis.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0)
        axis.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=8)
        axis.set_yticks(
            range(len(query_tokens)),
            query_tokens if panel % columns == 0 else [""] * len(query_tokens),
            fontsize=8,
        )
        axis.set_title(f"head {head + 1}", fontsize=9)
    figure.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    if title:
        figure.suptitle(title, fontsize=10)
    return _save(figure, path)
