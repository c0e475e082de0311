"""The Dirichlet label partition of a cluster's data over its nodes ([training] dirichlet_alpha)."""

import numpy as np
import pytest

from depl.scenario import ScenarioError, parse_scenario
from depl.train.task import data
from depl.train.engine.federation import Job, node_data
from trainkit import scenario_dict

LABELS = data.mnist1d().y_train  # the real labels a partition of mnist1d-noniid splits


def _label_skew(shares: list[np.ndarray], labels: np.ndarray) -> float:
    """Mean total-variation distance between a node's label histogram and the whole data's."""
    whole = np.bincount(labels, minlength=10) / len(labels)
    return float(np.mean([0.5 * np.abs(np.bincount(labels[s], minlength=10) / len(s) - whole).sum()
                          for s in shares]))


def test_a_dirichlet_partition_is_a_function_of_its_seed_and_the_nodes():
    a = data.node_shares(LABELS, 4, iid=False, alpha=0.5)
    b = data.node_shares(LABELS, 4, iid=False, alpha=0.5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    other = data.node_shares(LABELS, 4, iid=False, alpha=0.5, seed=data.PARTITION_SEED + 1)
    assert not all(np.array_equal(x, y) for x, y in zip(a, other))
    assert len(data.node_shares(LABELS, 3, iid=False, alpha=0.5)) == 3


@pytest.mark.parametrize("nodes,alpha", [(2, 0.1), (4, 0.5), (7, 5.0)])
def test_a_dirichlet_partition_holds_every_sample_exactly_once(nodes, alpha):
    shares = data.node_shares(LABELS, nodes, iid=False, alpha=alpha)
    assert len(shares) == nodes
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(len(LABELS)))
    assert min(len(s) for s in shares) >= data.MIN_NODE_SAMPLES


def test_the_label_skew_is_large_for_small_alpha_and_shrinks_as_alpha_grows():
    skew = {alpha: np.mean([_label_skew(data.node_shares(LABELS, 4, iid=False, alpha=alpha, seed=s), LABELS)
                            for s in range(5)])
            for alpha in (0.1, 0.5, 5.0, 1000.0)}
    assert skew[0.1] > skew[0.5] > skew[5.0] > skew[1000.0]
    assert skew[0.1] > 0.5          # a node holds mostly a few classes
    iid = _label_skew(data.node_shares(LABELS, 4, iid=True), LABELS)  # 0.04: sampling noise of a random cut
    assert skew[1000.0] < 0.05 and iid < 0.06 and skew[0.5] > 5 * iid


def test_a_partition_that_starves_a_node_is_refused_not_trained():
    few = np.repeat(np.arange(10), 5)  # 50 samples over 8 nodes, α tiny: some node gets < 10
    with pytest.raises(data.DataError, match="raise dirichlet_alpha or use fewer nodes"):
        data.node_shares(few, 8, iid=False, alpha=0.01)


def test_the_scenario_key_reaches_the_nodes_and_keeps_old_runs_identity():
    d = scenario_dict(iid=False)
    plain = data.data_spec(parse_scenario(d), ["d1", "d2"])
    assert "alpha" not in plain.to_json()  # runs made before the key existed keep their ids
    d["training"]["dirichlet_alpha"] = 0.3
    spec = data.data_spec(parse_scenario(d), ["d1", "d2"])
    assert data.DataSpec.from_json(spec.to_json()) == spec
    _, y = data.select(spec)
    expected = data.node_shares(y, 2, iid=False, alpha=0.3)
    for node in range(2):
        x_node, y_node = node_data(spec, 2, False, node)
        assert np.array_equal(y_node.numpy(), y[expected[node]])
    assert len(node_data(spec, 2, False, 0)[1]) != len(node_data(plain, 2, False, 0)[1])  # not the shards
    options = Job(spec, {}, {}, []).to_json()["options"]
    assert "dirichlet_alpha" not in options  # it travels with the data only: old runs keep their ids


def test_dirichlet_alpha_with_iid_is_a_plain_error():
    d = scenario_dict(iid=True)
    d["training"]["dirichlet_alpha"] = 0.5
    with pytest.raises(ScenarioError, match=r"training\.iid.*set iid = false"):
        parse_scenario(d)
    d["training"].update(iid=False, dirichlet_alpha=0.0)
    with pytest.raises(ScenarioError, match="dirichlet_alpha"):
        parse_scenario(d)


if __name__ == "__main__":  # the numbers docs/training.md quotes
    for a in (0.1, 0.5, 5.0, 1000.0):
        print(f"alpha {a:g}: mean label skew over 4 nodes {np.mean([_label_skew(data.node_shares(LABELS, 4, iid=False, alpha=a, seed=s), LABELS) for s in range(5)]):.2f}")
    print(f"iid random cut: {_label_skew(data.node_shares(LABELS, 4, iid=True), LABELS):.2f}")
    print("mnist1d-noniid's node sizes:", [len(s) for s in data.node_shares(LABELS, 4, iid=False, alpha=0.5)])
