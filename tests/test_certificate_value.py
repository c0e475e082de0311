"""depl.certificate.Certificate: one value for every certificate — every committed plan, certify and validate file
reads back through it unchanged, a malformed or unknown one is refused naming its field, and the verdict → exit code map."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from depl.certificate import FORMAT, Certificate, CertificateError, Kind, Outcome

ROOT = Path(__file__).resolve().parents[1]
PRINTED = ("report", "png", "seed_training", "exit_code")   # a command's --json beside its certificate


def committed_certificates() -> list[tuple[str, dict]]:
    """(where, JSON) of every certificate in a JSON file git tracks: a plan's info.certificate, a certify or validate
    file (or what the command printed with --json: the certificate, where its files are and its exit code), the
    certificates the benchmarks' reports hold."""
    files = subprocess.run(["git", "ls-files", "*.json"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    found = []

    def walk(d, where):
        if isinstance(d, dict):
            if d.get("format") == FORMAT or "certificate" in d and isinstance(d["certificate"], dict):
                c = d if d.get("format") == FORMAT else d["certificate"]
                c = {k: v for k, v in c.items() if k not in PRINTED}
                found.append((where, c))
                return
            for k, v in d.items():
                walk(v, f"{where}.{k}")
        elif isinstance(d, list):
            for i, v in enumerate(d):
                walk(v, f"{where}[{i}]")

    for f in files:
        text = (ROOT / f).read_text(encoding="utf-8") if (ROOT / f).is_file() else ""
        if "certif" in text:
            walk(json.loads(text), f)
    return found


def test_every_committed_certificate_round_trips_through_the_one_type():
    found = committed_certificates()
    kinds = set()
    for where, c in found:
        cert = Certificate.from_json(c, where)
        assert cert.to_json() == c, where
        kinds.add(cert.kind)
    # plan --alpha's, plan --certify's, certify's and validate's files are all committed, in the one shape
    assert kinds == set(Kind) and len(found) >= 50


def sequential(**changed) -> dict:
    c = Certificate(Kind.SEQUENTIAL, Outcome.CERTIFIED, 0.9, 0.3, 0.05, 0.05, 40, 40, ((7, 46),), 0.91,
                    {"run_id": "certify-x"}).to_json()
    return {**c, **changed}


@pytest.mark.parametrize("changed, field", [
    ({"format": "depl.certificate/1"}, "format"), ({"format": None}, "format"), ({"kind": "fixed"}, "kind"),
    ({"verdict": "not certified"}, "verdict"), ({"omega": 1.5}, "omega"), ({"alpha": 0.7}, "alpha"),
    ({"runs": -1}, "runs"), ({"hits": 41}, "hits"), ({"seeds": [[5, 3]]}, "seeds"), ({"lower_bound": "x"}, "lower_bound"),
    ({"alpha_share": 0.2}, "alpha_share"), ({"evidence": []}, "evidence"), ({"certified": True}, "certified"),
])
def test_a_malformed_certificate_is_refused_in_one_line_naming_its_field(changed, field):
    with pytest.raises(CertificateError) as e:
        Certificate.from_json(sequential(**changed), "c.json")
    assert str(e.value).startswith(f"c.json: {field} = ") and "\n" not in str(e.value)


def test_the_verdict_exit_code_map():
    assert [Outcome(v).exit_code() for v in ("certified", "undecided", "refuted")] == [0, 3, 4]
    # depl validate asks whether the promise is refuted: undecided is not refuted
    assert [Outcome(v).exit_code("promise") for v in ("certified", "undecided", "refuted")] == [0, 0, 4]
    c = Certificate.from_json(sequential(verdict="refuted"))
    assert c.exit_code() == 4 and not c.certified and c.run_id == "certify-x" and c.seeds == ((7, 46),)
