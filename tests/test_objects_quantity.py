"""Quantities (kubeforge.objects: ``parse_quantity`` and ``quantity_value``, objects/_node.py):
kubeforge's resource-quantity parser against the Kubernetes Python client's, which it replaces
in the operator process (importing ``kubernetes.utils.quantity`` imports the whole synchronous
client): the same value or the same refusal for every input."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from examples import examples
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as client_parse

from kubeforge.objects import quantity_value
from kubeforge.objects._node import parse_quantity

SUFFIXES = ["", "n", "u", "m", "k", "K", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
            "ki", "mi", "ni", "ui", "Zi", "Q", "i", "e3", "E3", "e-2", "B"]
NUMBERS = ["0", "1", "2", "500", "1.5", ".5", "5.", "-1", "+3", "1e3", "12345678901234567890", "", "abc", "0x10",
           "1_000", " 1", "NaN", "Infinity"]


def same(value: object) -> None:
    try:
        want: object = client_parse(value)
    except ValueError:
        want = ValueError
    try:
        got: object = parse_quantity(value)
    except ValueError:
        got = ValueError
    if isinstance(want, Decimal) and want.is_nan():
        assert isinstance(got, Decimal) and got.is_nan(), value
    else:
        assert got == want, value


def test_same_as_the_kubernetes_client():
    for number in NUMBERS:
        for suffix in SUFFIXES:
            same(number + suffix)


@settings(max_examples=examples(400), deadline=None)
@given(st.one_of(st.integers(-10**6, 10**6), st.text(alphabet="0123456789.eE+-numkKMGTPEi", max_size=8)))
def test_same_as_the_kubernetes_client_on_random_input(value):
    same(value)


def test_units_of_the_native_resources():
    assert quantity_value("cpu", "500m") == 500 and quantity_value("cpu", 2) == 2000
    assert quantity_value("memory", "1Gi") == 2**30 and quantity_value("memory", "1G") == 10**9
    assert quantity_value("memory", "lots") == 0 and quantity_value("cpu", "-1") == 0
