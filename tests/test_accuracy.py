"""Precision and recall of every rule over all fixtures; `pytest -k accuracy -s` prints them."""

from fixture_cases import load_cases, score

MIN_PRECISION, MIN_RECALL = 0.95, 0.90


def test_accuracy_per_rule():
    table = score(load_cases())
    print(f"\n{'rule':<8}{'tp':>5}{'fp':>5}{'fn':>5}{'precision':>11}{'recall':>8}")
    failing = []
    for code, c in table.items():
        tp, fp, fn = c.get("tp", 0), c.get("fp", 0), c.get("fn", 0)
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        print(f"{code:<8}{tp:>5}{fp:>5}{fn:>5}{precision:>11.2f}{recall:>8.2f}")
        if precision < MIN_PRECISION or recall < MIN_RECALL:
            failing.append(code)
    assert table, "no fixtures were scored"
    assert not failing, f"rules below {MIN_PRECISION} precision or {MIN_RECALL} recall: {failing}"
