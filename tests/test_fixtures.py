import pytest
from fixture_cases import found, load_cases

CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fixture_findings_match_header(case):
    assert sorted(found(case)) == sorted(case.expected)
