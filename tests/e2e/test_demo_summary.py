"""`make demo` ends by saying what its QA systems answer (EM and F1 on the test questions)."""

from flows.demo import open_qa_summary


def test_demo_summary_reports_em_f1_and_recall_per_system() -> None:
    manifest = {"results": {"squad-open": {"questions": 1034, "systems": {
        "gold paragraph reader": {"EM": 0.5, "F1": 0.6, "R@5": 1.0, "R@5 read": 1.0},
        "BM25 + reader": {"EM": 0.301, "F1": 0.4, "R@5": 0.9, "R@5 read": 0.89}}}}}
    assert open_qa_summary(manifest).splitlines() == [
        "",
        "open-domain QA (test questions; EM / F1 / answer in the top 5 blocks):",
        "  squad-open (1,034 questions)",
        "    gold paragraph reader    EM  50.0  F1  60.0  R 100.0",
        "    BM25 + reader            EM  30.1  F1  40.0  R  90.0"]
