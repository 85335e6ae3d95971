"""Attention pictures: what is drawn is the weights given, head by head, on a 0-1 scale."""

import numpy as np
import pytest
from matplotlib.collections import LineCollection
from PIL import Image

from keras_transformer.visualization import (
    MIN_LINE_WEIGHT,
    draw_attention_heatmaps,
    draw_attention_lines,
)

TOKENS = ["▁The", "▁law", "▁will", "▁never", "▁be", "▁perfect", "</s>"]


def _weights(heads=3, queries=7, keys=7, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.random((heads, queries, keys)) ** 6
    return weights / weights.sum(-1, keepdims=True)


def _line_collections(figure):
    return [c for c in figure.axes[0].collections if isinstance(c, LineCollection)]


def test_lines_go_from_each_query_to_each_key_as_opaque_as_the_weight():
    weights = _weights()
    figure = draw_attention_lines(weights, TOKENS)
    collections = _line_collections(figure)
    assert len(collections) == 3  # one per head
    colours = set()
    for head, collection in enumerate(collections):
        drawn = {}
        for segment, rgba in zip(collection.get_segments(), collection.get_colors()):
            (x0, query), (x1, key) = segment
            assert (x0, x1) == (0.0, 1.0)
            drawn[int(query), int(key)] = rgba[3]
            colours.add(tuple(np.round(rgba[:3], 3)))
        expected = {
            (q, k): w for (q, k), w in np.ndenumerate(weights[head]) if w >= MIN_LINE_WEIGHT
        }
        assert drawn.keys() == expected.keys()
        np.testing.assert_allclose(
            [drawn[key] for key in expected], list(expected.values()), atol=1e-6
        )
    assert len(colours) == 3  # one colour per head
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == ["head 1", "head 2", "head 3"]  # counted from 1, as the paper


def test_lines_of_one_query_and_chosen_heads(tmp_path):
    weights = _weights(heads=8)
    path = tmp_path / "its.png"
    figure = draw_attention_lines(weights, TOKENS, heads=[4, 5], query_index=2, path=path)
    for collection in _line_collections(figure):
        assert {int(segment[0][1]) for segment in collection.get_segments()} == {2}
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["head 5", "head 6"]
    with Image.open(path) as image:
        assert image.format == "PNG"


def test_heatmaps_show_each_head_on_one_zero_to_one_scale_with_a_colour_bar(tmp_path):
    weights = _weights(heads=6, queries=4, keys=7)
    path = tmp_path / "heat.png"
    figure = draw_attention_heatmaps(weights, TOKENS[:4], TOKENS, path=path)
    panels = [
        axis
        for axis in figure.axes
        if axis.images and axis.get_visible() and axis.get_title().startswith("head")
    ]
    assert [axis.get_title() for axis in panels] == [f"head {h}" for h in range(1, 7)]
    for head, axis in enumerate(panels):
        np.testing.assert_allclose(axis.images[0].get_array(), weights[head])
        assert axis.images[0].get_clim() == (0.0, 1.0)
        assert [t.get_text() for t in axis.get_xticklabels()] == TOKENS
    colour_bars = [axis for axis in figure.axes if axis.get_ylabel() == "attention weight"]
    assert len(colour_bars) == 1
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > image.size[1]


def test_bad_shapes_and_heads_are_named():
    with pytest.raises(ValueError, match="one sentence"):
        draw_attention_heatmaps(_weights()[None], TOKENS)
    with pytest.raises(ValueError, match="do not match"):
        draw_attention_lines(_weights(), TOKENS[:-1])
    with pytest.raises(ValueError, match="head 3 is out of range"):
        draw_attention_lines(_weights(), TOKENS, heads=[3])


def test_the_legend_covers_neither_the_title_nor_the_tokens():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    title = "encoder-decoder attention, layer 6 of 6, heads 1, 2, 3, 4, 5, 6, 7, 8"
    figure = draw_attention_lines(_weights(heads=8), TOKENS, title=title)
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    legend = figure.legends[0].get_window_extent(renderer)
    covered = [t for t in figure.texts if t.get_text() == title] + list(figure.axes[0].texts)
    assert len(covered) == 1 + len(TOKENS) * 2
    assert not any(legend.overlaps(text.get_window_extent(renderer)) for text in covered)
