"""`keras-transformer attention`: draws the attention of one layer for one sentence (the
paper's figures 3-5), to two PNG files.

Layers and heads are counted from 1, as the paper does ("layer 5 of 6"). The sentence is
tokenized with the model's vocabulary and ends with eos (`</s>`), as the model reads it.

- `--stack encoder` (default): encoder self-attention over the sentence;
- `--stack decoder`: the decoder's masked self-attention over the translation (`--target`,
  or else the model's own beam-search translation), or with `--cross` its encoder-decoder
  attention from the translation to the sentence. Decoder queries are labelled with the token
  each position predicts; decoder self-attention keys with the token each position reads
  (`<s>`, then the translation).

Two pictures are written: `OUTPUT` (default `attention-STACK-layerL.png`), the paper's style
(the tokens in two columns, a line from each query to each key as opaque as its weight, one
colour per head), and `OUTPUT` with `.heatmap.png` (one heat map per head, with a colour
bar). Their paths are printed.
"""

import os

from keras_transformer.errors import UserInputError

HELP = "draw the attention weights of one layer for a sentence (paper figures 3-5)"
EXAMPLE = (
    "keras-transformer attention --model runs/ende --layer 5 --head 5 "
    '"The law will never be perfect, but its application should be just."'
)


def add_arguments(parser):
    parser.add_argument("sentence", help="the source sentence, as one argument")
    parser.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="a training output_dir, a .keras file or a checkpoint prefix",
    )
    parser.add_argument(
        "--vocab",
        metavar="FILE",
        help="the SentencePiece .model (default: the one the .keras file "
        "carries, else vocab.model beside the model)",
    )
    parser.add_argument(
        "--layer",
        type=int,
        required=True,
        metavar="L",
        help="the layer, counted from 1 as the paper ('layer 5 of 6' is 5)",
    )
    parser.add_argument(
        "--head",
        type=int,
        action="append",
        metavar="H",
        help="draw only this head, counted from 1; repeat it for several "
        "(the paper's figure 4: --head 5 --head 6); default: every head",
    )
    parser.add_argument(
        "--stack",
        choices=("encoder", "decoder"),
        default="encoder",
        help="whose attention: the encoder's (default) or the decoder's",
    )
    parser.add_argument(
        "--cross",
        action="store_true",
        help="with --stack decoder: the encoder-decoder attention instead of "
        "the decoder's self-attention",
    )
    parser.add_argument(
        "--target",
        metavar="TEXT",
        help="with --stack decoder: the translation to feed the decoder "
        "(default: the model's own, by beam search)",
    )
    parser.add_argument(
        "--token",
        type=int,
        metavar="N",
        help="in the line picture, draw only the attention of the N-th query "
        "token, counted from 1 (as the paper's figure 3 for 'making')",
    )
    parser.add_argument(
        "--output",
        metavar="PNG",
        help="the line picture; the heat map goes beside it as "
        "NAME.heatmap.png (default: attention-STACK-layerL.png, in "
        "the current folder or in --output when that is a folder)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace pictures that exist already at those paths",
    )


def _pieces(vocabulary, ids):
    # A SentencePiece processor, or an imported model's vocabulary (its id table's pieces).
    processor = getattr(vocabulary, "processor", vocabulary)
    if hasattr(processor, "id_to_piece"):
        return [processor.id_to_piece(int(i)) for i in ids]
    return [vocabulary.decode([int(i)]) or str(int(i)) for i in ids]


def _check_range(name, value, count, what):
    if value is not None and not 1 <= value <= count:
        raise UserInputError(
            f"{name} {value} is out of range: {what} 1 to {count} (counted from 1)"
        )


def _output_paths(args):
    if args.output is None or os.path.isdir(args.output):
        kind = "-cross" if args.cross else ""
        head = "" if args.head is None else "-head" + "-".join(map(str, args.head))
        lines = f"attention-{args.stack}{kind}-layer{args.layer}{head}.png"
        # A folder gets the default names inside it (not the hidden FOLDER/.png).
        lines = lines if args.output is None else os.path.join(args.output, lines)
    else:
        lines = args.output if args.output.lower().endswith(".png") else args.output + ".png"
    heatmap = lines[: -len(".png")] + ".heatmap.png"
    folder = os.path.dirname(os.path.abspath(lines))
    if not os.path.isdir(folder):
        raise UserInputError(f"--output {args.output!r}: folder {folder!r} does not exist")
    from keras_transformer.files import check_new_output_file

    # Checked before the model loads: an earlier picture is never replaced unasked.
    for path in (lines, heatmap):
        check_new_output_file(path, "--output", args.overwrite)
    return lines, heatmap


def _check_arguments(args):
    if args.cross and args.stack != "decoder":
        raise UserInputError(
            "--cross is the decoder's encoder-decoder attention: add --stack decoder"
        )
    if args.target is not None and args.stack != "decoder":
        raise UserInputError("--target feeds the decoder: add --stack decoder")
    if not args.sentence.strip():
        raise UserInputError(
            "the sentence is empty: give the text to look at as the last argument, in quotes"
        )


def run(args):
    _check_arguments(args)
    lines_path, heatmap_path = _output_paths(args)

    import numpy as np
    from keras import ops

    from keras_transformer.translation import Translator
    from keras_transformer.visualization import draw_attention_heatmaps, draw_attention_lines

    translator = Translator.load(args.model, vocabulary=args.vocab, compile=False)
    model, vocabulary = translator.model, translator.vocabulary
    config = model.config
    stack_layers = config.num_layers
    _check_range(
        "--layer", args.layer, stack_layers, f"this model's {args.stack} has {stack_layers} layers,"
    )
    for head in args.head or []:
        _check_range(
            "--head", head, config.num_heads, f"this model has {config.num_heads} heads per layer,"
        )

    def token_ids(text, what, side="source"):
        # Each side's own model: an imported model's vocabulary has one per side.
        encode = vocabulary.encode_source if side == "source" else vocabulary.encode_target
        ids = encode(text, add_eos=False) + [config.eos_id]
        if len(ids) > config.max_length:
            raise UserInputError(
                f"the {what} has {len(ids)} tokens (with eos); this model "
                f"reads at most {config.max_length}: give a shorter one"
            )
        return ids

    source_ids = token_ids(args.sentence, "sentence")
    target_ids = None
    if args.stack == "decoder":
        if args.target is None:
            target = translator.translate([args.sentence])[0]
            print(f"translation: {target}")
            # Decoding stops at max_length tokens: an output cut there is shown as it is.
            output_ids = vocabulary.encode_target(target, add_eos=False) + [config.eos_id]
            output_ids = output_ids[: config.max_length]
        else:
            output_ids = token_ids(args.target, "target", side="target")
        target_ids = [config.bos_id] + output_ids[:-1]  # the decoder input, shifted right
    kind = "cross" if args.cross else "self"
    weights = ops.convert_to_numpy(
        model.attention_weights(
            np.array([source_ids], "int32"),
            None if target_ids is None else np.array([target_ids], "int32"),
            stack=args.stack,
            kind=kind,
            layer_index=args.layer - 1,
        )
    )[0]

    if args.stack == "encoder":
        queries = keys = _pieces(vocabulary, source_ids)
    else:
        queries = _pieces(vocabulary, output_ids)
        keys = _pieces(vocabulary, source_ids if args.cross else target_ids)
    _check_range("--token", args.token, len(queries), "the queries are tokens")
    heads = None if args.head is None else [head - 1 for head in args.head]
    title = _title(args, stack_layers)
    draw_attention_lines(
        weights,
        queries,
        keys,
        heads=heads,
        query_index=None if args.token is None else args.token - 1,
        title=title,
        path=lines_path,
    )
    draw_attention_heatmaps(weights, queries, keys, heads=heads, title=title, path=heatmap_path)
    print(f"attention lines (paper figures 3-5): {lines_path}")
    print(f"attention heat map: {heatmap_path}")
    return 0


def _title(args, stack_layers):
    """What the pictures show, e.g. "encoder self-attention, layer 2 of 6, heads 1, 3"."""
    what = {"encoder": "encoder self-attention", "decoder": "decoder self-attention"}[args.stack]
    if args.cross:
        what = "encoder-decoder attention"
    title = f"{what}, layer {args.layer} of {stack_layers}"
    if args.head is not None:
        title += f", head{'s' if len(args.head) > 1 else ''} {', '.join(map(str, args.head))}"
    return title
