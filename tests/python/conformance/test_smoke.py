"""The harness itself: a case that must pass and one that must be caught."""
import pytest
import torch

from harness import assert_meta_matches, cases, check


@pytest.mark.parametrize("shape", cases("neg", [(2, 3), (0, 3), ()]))
def test_neg(shape):
    check("neg", torch.neg, torch.randn(shape))


def test_meta_mismatch_is_caught():
    expected = torch.empty(2, 3)
    with pytest.raises(AssertionError, match="sizes"):
        assert_meta_matches({"dtype": "float32", "sizes": [3, 2], "strides": [2, 1]}, expected)
    with pytest.raises(AssertionError, match="strides"):
        assert_meta_matches({"dtype": "float32", "sizes": [2, 3], "strides": [1, 2]}, expected)
