"""The length penalties of beam search and the per-sentence output length limit (paper 6.1).

Beam search ranks a hypothesis Y by log P(Y|X) / lp(Y), with one of two length penalties:

- "gnmt", the paper's (Wu et al., 2016, its reference [31]): lp(Y) = ((5 + |Y|) / 6) ** alpha;
- "power", that of Marian, fairseq, Hugging Face transformers and CTranslate2:
  lp(Y) = |Y| ** alpha.

|Y| counts the output tokens including the final end-of-sentence token, never the start
token: as transformers 5's `generate` counts it (`cur_len + 1 - decoder_prompt_len` when a
hypothesis finishes). The paper uses the GNMT form with alpha = 0.6; alpha = 0 ranks by the
raw log-probability under either form. Both grow with |Y| for alpha >= 0, which the early
exit of beam search relies on. The paper also caps the output at "input length + 50":
`max_output_lengths` gives that cap per sentence.
"""

from keras import ops

from keras_transformer.decoding.settings import LENGTH_PENALTIES


def length_penalty(length, alpha, form="gnmt"):
    """lp(|Y|): ((5 + length) / 6) ** alpha ("gnmt") or length ** alpha ("power").

    Args:
        length: |Y|, output tokens including eos (int, float or tensor).
        alpha: the strength of the penalty (0.6 in the paper; 0 disables it).
        form: "gnmt" or "power" (`LENGTH_PENALTIES`); or a scalar boolean tensor, True for
            "power" (an exported graph's per-request choice).

    Returns:
        A float (for Python numbers and a named form) or a float32 tensor shaped like
        `length`.

    Example:
    >>> round(length_penalty(10, 0.6), 4)     # ((5 + 10) / 6) ** 0.6 = 2.5 ** 0.6
    1.7329
    >>> length_penalty(4, 0.5, "power")       # 4 ** 0.5
    2.0
    """
    if isinstance(form, str) and form not in LENGTH_PENALTIES:
        raise ValueError(f"length penalty must be one of {LENGTH_PENALTIES}, got {form!r}")
    if isinstance(length, (int, float)) and isinstance(form, str):
        return float(length) ** alpha if form == "power" else ((5.0 + length) / 6.0) ** alpha
    length = ops.cast(length, "float32")
    if isinstance(form, str):
        base = length if form == "power" else (5.0 + length) / 6.0
    else:
        base = ops.where(form, length, (5.0 + length) / 6.0)
    return ops.power(base, alpha)


def max_output_lengths(source_ids, pad_id, max_extra_length, max_length):
    """Per-sentence output caps: source length + `max_extra_length`, at most `max_length`.

    Args:
        source_ids: `[batch, source_length]` int token ids padded with `pad_id`.
        pad_id: the padding id.
        max_extra_length: tokens allowed beyond the source length (50 in the paper).
        max_length: the model's longest sequence (`config.max_length`).

    Returns:
        `(per_sentence, buffer_length)`: an int32 tensor `[batch]` of output caps (eos
        included) and the bound of them all, the length of the decoding buffers and cache:
        min(source_length + max_extra_length, max_length). It is a Python int (a static shape,
        as XLA wants) when the source length and `max_extra_length` are known while tracing,
        and a scalar tensor otherwise (a SavedModel's signature takes any source length and
        the setting per request).

    Example:
    >>> caps, buffer = max_output_lengths(keras.ops.array([[5, 6, 3], [7, 3, 0]]), 0, 2, 100)
    >>> keras.ops.convert_to_numpy(caps).tolist(), buffer
    ([5, 4], 5)
    """
    source_lengths = ops.sum(ops.cast(ops.not_equal(source_ids, pad_id), "int32"), axis=1)
    per_sentence = ops.minimum(source_lengths + max_extra_length, max_length)
    per_sentence = ops.maximum(per_sentence, 1)
    if isinstance(source_ids.shape[1], int) and isinstance(max_extra_length, int):
        buffer_length = min(source_ids.shape[1] + max_extra_length, max_length)
        return per_sentence, max(buffer_length, 1)
    buffer_length = ops.minimum(ops.shape(source_ids)[1] + max_extra_length, max_length)
    return per_sentence, ops.maximum(buffer_length, 1)
