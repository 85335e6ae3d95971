import json

import pytest

from keras_transformer.config import PRESETS, TABLE3, TransformerConfig
from keras_transformer.errors import UserInputError


def test_base_and_big_are_table_3():
    base = TransformerConfig.from_preset("base", vocab_size=37000)
    assert (
        base.num_layers,
        base.d_model,
        base.d_ff,
        base.num_heads,
        base.key_dim,
        base.value_dim,
        base.dropout,
        base.label_smoothing,
    ) == (6, 512, 2048, 8, 64, 64, 0.1, 0.1)
    big = TransformerConfig.from_preset("big", vocab_size=37000)
    assert (big.num_layers, big.d_model, big.d_ff, big.num_heads, big.dropout) == (
        6,
        1024,
        4096,
        16,
        0.3,
    )
    assert TransformerConfig.from_preset("big_en_fr").dropout == 0.1  # section 6.1


def test_every_table_3_row_has_a_preset():
    expected = {
        "A.h=1": dict(num_heads=1, key_dim=512, value_dim=512),
        "A.h=32": dict(num_heads=32, key_dim=16, value_dim=16),
        "B.d_k=16": dict(key_dim=16, value_dim=64),
        "C.N=8": dict(num_layers=8),
        "C.d_model=256": dict(d_model=256, key_dim=32, value_dim=32),
        "C.d_ff=4096": dict(d_ff=4096),
        "D.P_drop=0.2": dict(dropout=0.2),
        "D.eps_ls=0.0": dict(label_smoothing=0.0),
        "E.learned": dict(positional="learned"),
    }
    for name, values in expected.items():
        config = TransformerConfig.from_preset(name)
        assert {k: getattr(config, k) for k in values} == values, name
    assert set(TABLE3) <= set(PRESETS) and len(PRESETS) == 23  # + parsing_wsj, parsing_semi (6.3)


def test_table_3_parameter_counts_within_7_percent_of_the_paper():
    for name, paper_millions in TABLE3.items():
        if paper_millions is None:
            continue
        ours = TransformerConfig.from_preset(name, vocab_size=37000).parameter_count() / 1e6
        assert abs(ours - paper_millions) / paper_millions < 0.07, (name, ours, paper_millions)


def test_json_round_trip_and_overrides():
    config = TransformerConfig.from_preset("C.N=2", vocab_size=8000, norm_position="pre")
    assert TransformerConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["num_layers"] == 2


def test_bad_values_give_clear_errors():
    with pytest.raises(UserInputError, match="unknown TransformerConfig field.*'layers'"):
        TransformerConfig.from_dict({"layers": 6})
    with pytest.raises(UserInputError, match="unknown preset 'huge'.*base"):
        TransformerConfig.from_preset("huge")
    with pytest.raises(UserInputError, match="dropout=1.5"):
        TransformerConfig(dropout=1.5)
    with pytest.raises(UserInputError, match="num_heads.*must divide d_model"):
        TransformerConfig(d_model=30, num_heads=4)
    with pytest.raises(UserInputError, match="norm_position"):
        TransformerConfig(norm_position="middle")
    with pytest.raises(UserInputError, match=r"activation='tanh'.*relu.*swish.*gelu"):
        TransformerConfig(activation="tanh")


def test_special_ids_eos_apart_from_pad_and_bos_all_below_vocab_size():
    # OPUS-MT: eos 0, unk 1, pad last, and decoding starts from pad (bos == pad).
    opus = TransformerConfig(vocab_size=100, eos_id=0, unk_id=1, pad_id=99, bos_id=99)
    assert (opus.pad_id, opus.bos_id, opus.eos_id, opus.unk_id) == (99, 99, 0, 1)
    assert TransformerConfig().unk_id == 1
    with pytest.raises(UserInputError, match="eos_id=0: must differ from pad_id=0"):
        TransformerConfig(vocab_size=100, pad_id=0, bos_id=2, eos_id=0)
    with pytest.raises(UserInputError, match="eos_id=2: must differ from bos_id=2"):
        TransformerConfig(vocab_size=100, bos_id=2, eos_id=2)
    for field in ("pad_id", "bos_id", "eos_id", "unk_id"):
        with pytest.raises(UserInputError, match=f"{field}=100: must be below vocab_size=100"):
            TransformerConfig(vocab_size=100, **{field: 100})
    with pytest.raises(UserInputError, match="unk_id=-1: must be a non-negative integer"):
        TransformerConfig(unk_id=-1)


def test_a_preset_under_new_dims_keeps_d_k_and_d_v_at_d_model_over_h():
    # As OpenNMT-tf and fairseq: d_k = d_v = d_model / h follows d_model and h.
    small = TransformerConfig.from_preset("base", d_model=64, num_heads=2)
    assert (small.key_dim, small.value_dim) == (32, 32)
    assert TransformerConfig.from_preset("big", num_heads=8).key_dim == 1024 // 8
    # ... unless given, and not where the preset's d_k is its point (Table 3 row B).
    given = TransformerConfig.from_preset("base", d_model=64, num_heads=2, key_dim=64)
    assert (given.key_dim, given.value_dim) == (64, 32)
    row_b = TransformerConfig.from_preset("B.d_k=16", d_model=256)
    assert (row_b.key_dim, row_b.value_dim) == (16, 32)
    # Dims that h does not divide are an error naming the fix, not a silent d_k of 64.
    with pytest.raises(UserInputError, match="num_heads.*must divide d_model=64"):
        TransformerConfig.from_preset("base", d_model=64, num_heads=3)
    # The presets themselves are unchanged.
    assert TransformerConfig.from_preset("base").key_dim == 64
