"""`keras-transformer average`: average the weights of the last N checkpoints (paper 6.1).

The paper averages the last 5 checkpoints (written every 10 minutes) for base models and the
last 20 for big ones. Only model weights are averaged, not optimizer state. The result is a
`.keras` model that `translate`, `evaluate` and `export` load.
"""

import os

HELP = "average the weights of the last N checkpoints (paper 6.1)"
EXAMPLE = "keras-transformer average runs/ende --last 5"


def add_arguments(parser):
    parser.add_argument("run", metavar="RUN_DIR_OR_CHECKPOINTS",
                        help="a training output_dir, or its checkpoints/ folder")
    parser.add_argument("--last", type=int, default=5,
                        help="how many of the newest checkpoints to average (default: 5; the "
                             "paper uses 20 for big models)")
    parser.add_argument("--checkpoints", nargs="+", default=None, metavar="PREFIX",
                        help="average these checkpoints (path prefixes such as "
                             "RUN/checkpoints/ckpt-1000) instead of the last N")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="where to write the model (default: RUN_DIR/averaged.keras)")


def run(args):
    from keras_transformer.errors import UserInputError
    from keras_transformer.training import OutputDir, average_checkpoints
    from keras_transformer.training.output_dir import atomic_save_model

    run_dir = args.run
    if os.path.basename(os.path.normpath(run_dir)) == "checkpoints":
        run_dir = os.path.dirname(os.path.normpath(run_dir))
    if args.checkpoints:
        model = average_checkpoints(args.checkpoints)
    else:
        model = average_checkpoints(args.run, last=args.last)
    output = args.output or OutputDir(run_dir).averaged_model
    if not output.endswith(".keras"):
        raise UserInputError(f"--output {output!r} must end with .keras")
    atomic_save_model(model, output)
    print(f"averaged {len(model.averaged_checkpoints)} checkpoints "
          f"({os.path.basename(model.averaged_checkpoints[0])} .. "
          f"{os.path.basename(model.averaged_checkpoints[-1])}) into {output}")
    return 0
