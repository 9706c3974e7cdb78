"""Names of the parts of a predicted step (the keys of a prediction's ``time``) as people read
them, and the process-group kind whose link tier each communication part crosses."""
from __future__ import annotations

PART_NAMES = {"recompute_s": "recompute", "tp_comm_s": "TP communication",
              "cp_comm_s": "CP communication", "ep_comm_s": "expert all-to-all",
              "pp_comm_s": "pipeline send/recv", "bubble_s": "pipeline bubble",
              "dp_comm_s": "exposed DP communication", "optimizer_s": "optimizer step",
              "compute_s": "compute"}
TIER_OF_PART = {"tp_comm_s": "tp", "cp_comm_s": "cp", "ep_comm_s": "ep", "pp_comm_s": "pp",
                "dp_comm_s": "dp_cp"}
