"""How many neighbours each party has under SecAgg+, and what that buys: dropouts survived, colluders resisted.

Flower's ``SecAggPlusWorkflow`` (Bell et al., "Secure Single-Server Aggregation with (Poly)Logarithmic Overhead",
CCS 2020) arranges the n parties on a ring in a shuffled order; each party shares pairwise masks with, and splits
its two secrets (its private-mask seed and its mask key) into ``num_shares`` = m Shamir shares among, the m parties
of its window: itself and the h = (m − 1)/2 parties on each side. Any t = ``reconstruction_threshold`` shares
rebuild a secret. The cost per party grows with m, the server's with n·m: m = 2·⌈log₂ n⌉ + 1 makes the whole
protocol O(n log n) instead of the O(n²) of every party sharing with every other (``num_shares=1.0``).

What a choice (m, t) guarantees, for n parties of which a set D drops out (never sends its masked vector) and a
set C colludes with the coordinator (honest-but-curious: everyone follows the protocol):

* **Dropouts.** Flower completes the sum only while every party's window keeps at least t parties taking part;
  ``dropouts`` = m − t parties may drop anywhere (more if they are spread around the ring), once their key
  shares are out (Flower 1.41 halts on a party lost in the setup or key-sharing stage: docs/federation.md).
* **Collusion.** (a) A coalition of fewer than t parties holds fewer than t shares of any other party's secrets, so
  it can rebuild none. (b) What the coordinator and C learn about the parties outside C ∪ D is the sum over each
  connected part of them in the ring graph: each party's masked vector carries pairwise masks with its
  neighbours, the coalition can remove only the masks it shares or that the server rebuilds for dropped parties,
  and a mask between two honest parties cancels only in a sum holding both. If no h consecutive ring positions
  are all in C ∪ D, consecutive honest parties are neighbours and the honest parties form one part: the coalition
  learns their sum only. Any h consecutive positions lie in one window, which holds at most m − t dropped
  parties (Flower's check) and at most c colluders; so c + (m − t) ≤ h − 1 and c < t suffice, whatever positions
  the shuffle gives the colluders.

:func:`secaggplus_neighbourhood` sizes (m, t) for the coalition the ledger relies on: FedKT's coordinator entry
(:mod:`privfed.pipelines.fedkt.secure`) accounts the noise of the ``received − c`` honest contributors' shares for
``FedKT(collusion=c)``; that holds under both conditions above. With ``collusion=None`` (c = n − 1), or any c that
leaves a single honest contributor, the entry keeps the target's own share only, which holds whatever SecAgg+
reveals, and the window is sized for the coordinator alone (c = 0). Where m would reach n the graph is complete
(every party shares with every other, t = n − 1: one dropout; any c < n − 1 colluders learn only the honest sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Neighbourhood", "secaggplus_neighbourhood"]


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    """SecAgg+'s settings for ``nodes`` parties and what they tolerate.

    Attributes
    ----------
    nodes : int
        The parties taking part, n.
    shares : int
        m: the parties of each window (the party and its neighbours), each holding one share of its secrets;
        n when every party shares with every other.
    threshold : int
        t: the shares that rebuild a secret (and the parties each window must keep).
    colluders : int
        c: the parties colluding with the coordinator that learn no more than the honest parties' sum, with
        up to ``dropouts`` parties dropped.
    """

    nodes: int
    shares: int
    threshold: int
    colluders: int

    @property
    def dropouts(self) -> int:
        """Parties that may drop out anywhere with the sum still recovered (m − t)."""
        return self.shares - self.threshold

    @property
    def complete(self) -> bool:
        """Whether every party shares with every other (m = n)."""
        return self.shares == self.nodes

    def workflow_arguments(self) -> dict[str, int | float]:
        """``num_shares`` and ``reconstruction_threshold`` for Flower's ``SecAggPlusWorkflow``.

        The complete graph as fractions of the n nodes (Flower turns 1.0 into n and (n − 1)/n into n − 1, at least
        2: an integer ``num_shares`` must exceed 2), a ring window as integers.
        """
        if self.complete:
            return {"num_shares": 1.0, "reconstruction_threshold": (self.nodes - 1) / self.nodes}
        return {"num_shares": self.shares, "reconstruction_threshold": self.threshold}


def secaggplus_neighbourhood(n_nodes: int, *, colluders: int) -> Neighbourhood:
    """The SecAgg+ window for ``n_nodes`` parties that keeps the ledger's collusion assumption.

    ``colluders``: the parties the ledger assumes may collude with the coordinator (FedKT's
    :func:`~privfed.pipelines.fedkt.secure.colluding_parties`). The ledger relies on SecAgg+ against them only while
    at least two honest parties remain (c ≤ n − 2); otherwise the window is sized for the coordinator alone.

    The window: h = ⌈log₂ n⌉ + c neighbours on each side, m = 2h + 1 shares, t = h + 2 + c, so that c < t and
    c + (m − t) = h − 1 (module docstring): m − t = ⌈log₂ n⌉ − 1 dropouts whatever c. When m ≥ n, the complete graph,
    t = max(2, n − 1).

    Examples
    --------
    >>> secaggplus_neighbourhood(50, colluders=49)
    Neighbourhood(nodes=50, shares=13, threshold=8, colluders=0)
    >>> secaggplus_neighbourhood(50, colluders=2)
    Neighbourhood(nodes=50, shares=17, threshold=12, colluders=2)
    >>> secaggplus_neighbourhood(5, colluders=4).complete
    True
    """
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 2:
        raise ValueError(f"n_nodes must be an integer of at least 2 parties, got {n_nodes!r}")
    if isinstance(colluders, bool) or not isinstance(colluders, int) or colluders < 0:
        raise ValueError(f"colluders must be a non-negative integer number of parties, got {colluders!r}")
    relied = colluders if colluders <= n_nodes - 2 else 0
    half = math.ceil(math.log2(n_nodes)) + relied
    if 2 * half + 1 >= n_nodes:
        return Neighbourhood(nodes=n_nodes, shares=n_nodes, threshold=max(2, n_nodes - 1),
                             colluders=max(0, n_nodes - 2))
    return Neighbourhood(nodes=n_nodes, shares=2 * half + 1, threshold=half + 2 + relied, colluders=relied)
