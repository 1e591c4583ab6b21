"""MSHNet's soft-IoU warm-up: how many epochs a warm-up setting W means, under either reading.

Imports no torch: a run's config checks WARMUP_RULE with it where torch is not loaded (the
command line, the notebook builder); the loss that warms up is lib.losses.sls.SLSLoss.
"""

from __future__ import annotations

# How many soft-IoU warm-up epochs a warm-up setting W means. The official main.py trains
# 0-based epochs and switches to SLS when `epoch > warm_epoch` (model/loss.py compares the
# same way), so `--warm-epoch 5` warms up in epochs 0..5: six epochs. The paper's text reads
# as W epochs.
WARMUP_RULES = {
    "official": "epochs 0..W (W + 1 epochs), as the official main.py's `epoch <= warm_epoch`",
    "paper": "the first W epochs, as the paper's text reads",
}
OFFICIAL_WARM_EPOCH = 5  # main.py's --warm-epoch default


def warmup_length(warm_epoch: int, rule: str = "official") -> int:
    """Number of warm-up epochs for a setting W = ``warm_epoch`` under ``rule``.

    "official": W + 1 (the official loop warms up while the 0-based epoch <= W);
    "paper": W (0: no warm-up).
    """
    if rule not in WARMUP_RULES:
        raise ValueError(f"warm-up rule {rule!r} is unknown; expected one of "
                         f"{sorted(WARMUP_RULES)}")
    return warm_epoch + 1 if rule == "official" else warm_epoch


OFFICIAL_WARMUP = warmup_length(OFFICIAL_WARM_EPOCH)  # 6 epochs
