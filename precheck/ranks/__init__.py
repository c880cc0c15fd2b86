"""Cross-rank grading: a step folder of ranks run as one, and every call no single rank can replay.

A sharded step's calls fall into two kinds. Most are one rank's own call, replayed and graded by run_ut. The rest
are graded only from several ranks' records at once, and they live here:

- ``step``: the step folder (``rank0``, ``rank1`` ... or ``proc*``) run as one run, each rank's CSV pair in a folder
  of its name, one summary (``run_step``, ``RanksSummary``);
- ``collectives``: a collective's golden made in float64 from every rank's recorded inputs, read through
  ``collective_records`` (tensor dumps) and ``collective_stats`` (statistics dumps: what the statistics imply, in
  the words of ``stat_facts``); an all-to-all's rows by its split sizes (``all_to_all_splits``) and its statistics
  (``all_to_all_stats``);
- ``p2p``: each receive graded against the matching send on its peer (``batch_isend_irecv``'s P2POps and pipeline
  transfers included; their records read and paired by precheck.dump.p2p_calls, a statistics dump's compared by
  ``p2p_stats``);
- ``whole_calls``: a DTensor call put together from its shards across the mesh and graded as one call;
- ``CannotGrade`` (precheck.dump.cannot_grade): the one exception all of them raise when a call cannot be graded
  across ranks (its rows are SKIP with the reason).

Code outside this package reaches it by the names below; the pipeline, all-to-all and step-wide compare work that
follows lands here too.
"""

from __future__ import annotations

from precheck.dump.cannot_grade import CannotGrade
from precheck.ranks.collectives import Rank, grade_collectives, is_collective
from precheck.ranks.p2p import grade_point_to_point, is_point_to_point
from precheck.ranks.step import RanksSummary, run_step
from precheck.ranks.whole_calls import WHOLE, grade_sharded, is_sharded

__all__ = [
    "WHOLE",
    "CannotGrade",
    "RanksSummary",
    "Rank",
    "grade_collectives",
    "grade_point_to_point",
    "grade_sharded",
    "is_collective",
    "is_point_to_point",
    "is_sharded",
    "run_step",
]
