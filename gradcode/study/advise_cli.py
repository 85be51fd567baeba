"""The ``gradcode advise`` subcommand's arguments (the standard library only: the command line imports this before
numpy; the work is :func:`gradcode.study.advise.advise_main`)."""

from __future__ import annotations

GAP = 2e-4   # the relative target's default (gradcode.study.advise.GAP, which a test keeps equal)


def add_parser(sub) -> None:
    """Register ``advise`` in the subcommands ``sub`` of the ``gradcode`` parser."""
    adv = sub.add_parser("advise", help="which scheme, with which parameters, for this cluster: tune every scheme "
                                        "by simulation, rank them by time to target, recommend one")
    adv.add_argument("spec", help="experiment spec (TOML): its workers, workload, delay model (or trace), target")
    adv.add_argument("--out", help="also write advice.md, advice.html, advice.json and the figures here")
    adv.add_argument("--verify", action="store_true",
                     help="run the first choices on MPI and say whether the prediction held")
    adv.add_argument("--hostfile", help="MPI hostfile for --verify")
    adv.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                     help="the seeds (default: the spec's seeds, or its seed and the next 4)")
    adv.add_argument("--quick", action="store_true", help="fewer settings and 2 seeds")
    adv.add_argument("--target-gap", type=float, default=GAP, metavar="G",
                     help=f"without [run] target_loss: the target F* + G (F(w0) - F*) (default {GAP:g})")

