"""What a Selective-FD party's replies cost its silo's budget, from public parameters only.

A party's silo (:class:`~privfed.SiloBudget`) is charged before the party's setup, round or publish step reads its
data: :func:`planned_setup_release` (the DP selector's Gaussian sum), :func:`planned_round_release` (randomized
response, or the round's DP-SGD) and :func:`planned_publish_release` (the rounds' DP-SGD, when not charged yet) say
what the step will release, from the setup and round messages and the party's own model configuration, or why no
silo can charge it. :class:`~privfed.pipelines.selective_fd.local_clients.LocalClients` and the Flower client app
charge them through :func:`~privfed.pipelines.protocol.silo_gate.admit`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...accounting import DPSGD, RandomizedResponse, compose_dpsgd
from ...accounting.mechanism import Mechanism
from .dp_selector import selector_mechanism
from .steps import SelectiveFDRound, SelectiveFDSetup, continues_training

__all__ = ["planned_publish_release", "planned_round_release", "planned_setup_release"]


def planned_setup_release(setup: SelectiveFDSetup) -> Mechanism | str | None:
    """What the setup step releases: the DP selector's one Gaussian-noised sum (example level; its share masks
    in every round are post-processing of it), nothing without a client-side selector (None), or the reason no
    silo can charge it (the raw-data KuLSIF selector releases its decisions without noise)."""
    if not setup.shares or not setup.selects:
        return None
    if math.isnan(setup.selector_noise):
        return ("Selective-FD's raw-data KuLSIF selector releases which proxy examples the party shares without "
                "noise: no bound a silo could charge (use the DP selector, dp_selector=True)")
    return selector_mechanism(setup.selector_noise)


def _one_round_of_dp_sgd(local_model: Any) -> DPSGD | None:
    """The DP-SGD release of one round's local training (one Poisson epoch) from the model's public configuration;
    None when the model does not train with DP-SGD at a public sample rate."""
    config = getattr(local_model, "dp", None)
    if not continues_training(local_model) or config is None or not config.public_sample_rate:
        return None
    from ..models.dp_training import plan_release  # torch: imported only for a DP-trained (torch) model

    return plan_release(config, n=1, batch_size=local_model.batch_size, epochs=1)


def planned_round_release(setup: SelectiveFDSetup, message: SelectiveFDRound, *, local_model: Any
                          ) -> Mechanism | str | None:
    """What the party's reply to a round message releases, from the setup's and the round's public parameters
    and its own model's configuration.

    Under randomized response (``keep_probability`` < 1) the round's report: K-ary randomized response of the
    batch's labels, party level (it bounds the labels whatever model computed them; the share mask is the
    selector's, charged at setup). Otherwise the predictions reach the coordinator in the clear and only the
    round's DP-SGD training bounds them (example level); the reason no silo can charge the round when the model
    does not train with DP-SGD. Nothing (None) when nothing is shared (independent learning).
    """
    if not setup.shares:
        return None
    if not math.isnan(setup.keep_probability):
        if setup.keep_probability >= 1.0:
            return "Selective-FD with keep probability 1 sends the labels un-randomized: no bound a silo could charge"
        return RandomizedResponse(len(setup.classes), keep_probability=setup.keep_probability,
                                  labels_per_report=max(1, len(message.batch)), unit="party")
    training = _one_round_of_dp_sgd(local_model)
    if training is None:
        return ("Selective-FD sends the coordinator the party's predictions without randomized response, and its "
                "model is not DP-trained with a public sample_rate: no bound for the coordinator")
    return training


def planned_publish_release(setup: SelectiveFDSetup, *, local_model: Any, trainings: Sequence[DPSGD]
                            ) -> Mechanism | str | None:
    """What sending the party's model to be published releases, its rounds' DP-SGD ``trainings`` (their public
    parameters) done: nothing new (None) when every round was charged its DP-SGD training (the model is
    post-processing of it), the trainings composed otherwise, or the reason no silo can charge a model trained
    without DP-SGD."""
    if _one_round_of_dp_sgd(local_model) is None:
        return "the published model is trained on the party's data without DP-SGD: no bound a silo could charge"
    if not trainings or (setup.shares and math.isnan(setup.keep_probability)):
        return None
    return compose_dpsgd(trainings)
