"""Table-driven tests of Kubernetes LabelSelector matching (kubeforge.selectors)."""

from __future__ import annotations

import pytest

from kubeforge.selectors import selector_matches

LABELS = {"pool": "h100", "zone": "a", "spot": "true"}


def expr(key, op, *values):
    e = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


@pytest.mark.parametrize(
    "selector, labels, expected",
    [
        # empty selects everything
        (None, LABELS, True),
        ({}, LABELS, True),
        ({}, {}, True),
        ({"matchLabels": {}, "matchExpressions": []}, {}, True),
        ({"matchLabels": None, "matchExpressions": None}, LABELS, True),
        # matchLabels
        ({"matchLabels": {"pool": "h100"}}, LABELS, True),
        ({"matchLabels": {"pool": "h100", "zone": "a"}}, LABELS, True),
        ({"matchLabels": {"pool": "a100"}}, LABELS, False),
        ({"matchLabels": {"pool": "h100", "zone": "b"}}, LABELS, False),
        ({"matchLabels": {"missing": "x"}}, LABELS, False),
        ({"matchLabels": {"pool": "h100"}}, {}, False),
        # In
        ({"matchExpressions": [expr("zone", "In", "a", "b")]}, LABELS, True),
        ({"matchExpressions": [expr("zone", "In", "b", "c")]}, LABELS, False),
        ({"matchExpressions": [expr("missing", "In", "a")]}, LABELS, False),
        # NotIn (a missing key satisfies NotIn, as in Kubernetes)
        ({"matchExpressions": [expr("zone", "NotIn", "b")]}, LABELS, True),
        ({"matchExpressions": [expr("zone", "NotIn", "a", "b")]}, LABELS, False),
        ({"matchExpressions": [expr("missing", "NotIn", "a")]}, LABELS, True),
        # Exists / DoesNotExist
        ({"matchExpressions": [expr("spot", "Exists")]}, LABELS, True),
        ({"matchExpressions": [expr("missing", "Exists")]}, LABELS, False),
        ({"matchExpressions": [expr("spot", "DoesNotExist")]}, LABELS, False),
        ({"matchExpressions": [expr("missing", "DoesNotExist")]}, LABELS, True),
        ({"matchExpressions": [expr("empty", "Exists")]}, {"empty": ""}, True),
        # everything is ANDed
        ({"matchLabels": {"pool": "h100"}, "matchExpressions": [expr("zone", "In", "a"), expr("spot", "Exists")]},
         LABELS, True),
        ({"matchLabels": {"pool": "h100"}, "matchExpressions": [expr("zone", "In", "a"), expr("spot", "DoesNotExist")]},
         LABELS, False),
        ({"matchLabels": {"pool": "a100"}, "matchExpressions": [expr("zone", "In", "a")]}, LABELS, False),
    ],
)
def test_selector_matches(selector, labels, expected):
    assert selector_matches(selector, labels) is expected


@pytest.mark.parametrize("op", ["Gt", "in", "Equals", ""])
def test_unknown_operator_raises(op):
    with pytest.raises(ValueError, match="operator"):
        selector_matches({"matchExpressions": [expr("zone", op, "a")]}, LABELS)


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {"pool": "a100"}, "matchExpressions": [expr("zone", "Gt", "1")]},
        {"matchExpressions": [expr("zone", "In", "z"), expr("zone", "Gt", "1")]},
    ],
)
def test_unknown_operator_raises_whatever_the_labels(selector):
    with pytest.raises(ValueError):
        selector_matches(selector, LABELS)
