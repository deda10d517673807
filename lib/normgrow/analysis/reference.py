"""The reference study and the claims judged against it (params/reference.yaml): the paired gaps between variants
with the reference's numbers, the margins, and each claim's declaration (its kind, the gaps it reads, its statement).
Loaded and checked once (load_reference); claims.py and measured_claims.py judge them.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated

from ..config import PARAMS_DIR, ParamError, read_yaml
from ..schema import Float, Int, Str, in_range, section, validate
from .variants import load_variants


@section
class GapSpec:
    """A paired gap ``a - b`` (by seed). direction=+1: the reference reports it positive; 0: reported as ~0."""
    name: Str
    a: Str
    b: Str
    reference: Float | None
    reference_text: Str
    direction: Int
    meaning: Str


POSITIVE_NUMBER = in_range("a finite number > 0", lambda v: v > 0)


@section
class DepthMargin:
    multiple: Annotated[Float, POSITIVE_NUMBER]
    of: Str  # a gap with a nonzero reference value


@section
class ReferenceFile:
    """params/reference.yaml as written (load_reference); its claims are checked against its gaps by check_claims."""
    gaps: list[GapSpec]
    equivalence_margin: Annotated[Float, POSITIVE_NUMBER]
    depth_margin: DepthMargin
    claims: list
GAPS_PER_KIND = {"equivalence": 1, "directional": 1, "interaction": 2, "ratio": 2, "crossover": 1, "all_of": 0,
                 "measured": 1}
"""How a claim of params/reference.yaml is judged (the file explains each kind; claims.JUDGES and
measured_claims.MEASURED_JUDGES judge), with the number of gaps a claim of that kind reads."""
CLAIM_KINDS = tuple(GAPS_PER_KIND)


@dataclass(frozen=True)
class ClaimPart:
    """One claim an all_of claim needs: its name, the key of its evidence there and its label in the sentence."""
    key: str
    claim: str
    label: str


@dataclass(frozen=True)
class ClaimSpec:
    """A claim declared in params/reference.yaml: how it is judged (kind), the gaps it reads (by name), its statement
    (the file's template with its gaps' fields filled in at load), what a supported / refuted verdict means and, for
    all_of, its parts."""
    name: str
    kind: str
    gaps: tuple[str, ...]
    statement: str
    if_supported: str = ""
    if_refuted: str = ""
    parts: tuple[ClaimPart, ...] = ()


@dataclass(frozen=True)
class Reference:
    """params/reference.yaml: the gaps, and the two margins the claims are judged with (their reasons are in that
    file). equivalence_margin: nats/token within which a gap counts as equivalent to zero (claims.py, TOST).
    depth_margin: nats/token by which a placement's full-depth joint run must beat its first-stage single run for a
    growth claim to be judged (claims.depth_gate), given as ``multiple`` times the absolute reference value of the gap
    named by ``of``, so that it stays tied to the effect under test."""
    gaps: dict[str, GapSpec]
    equivalence_margin: float
    depth_multiple: float
    depth_of: str
    claims: tuple[ClaimSpec, ...] = ()

    @property
    def depth_margin(self) -> float:
        return self.depth_multiple * abs(self.gaps[self.depth_of].reference)

    def claim(self, name: str) -> ClaimSpec:
        return next(c for c in self.claims if c.name == name)


def load_reference() -> Reference:
    """params/reference.yaml, validated: its schema (ReferenceFile); every gap's a and b a variant; every claim's
    gaps present (removing one is an error here naming the claim, not a KeyError in the claims: check_claims); both
    margins finite and > 0; depth_margin.of a gap with a nonzero reference value."""
    path = PARAMS_DIR / "reference.yaml"
    raw = validate(ReferenceFile, read_yaml(path) or {}, str(path))
    variants = load_variants()
    gaps = {}
    for spec in raw.gaps:
        for v in (spec.a, spec.b):
            if v not in variants:
                raise ParamError(f"{path}: gap {spec.name!r} names {v!r}, which is not a run file of params/runs")
        gaps[spec.name] = spec
    claims = check_claims(path, raw.claims, gaps, raw.equivalence_margin)
    with_reference = [name for name, g in gaps.items() if g.reference]
    if raw.depth_margin.of not in with_reference:
        raise ParamError(f"{path}: depth_margin.of={raw.depth_margin.of!r} must name a gap with a nonzero reference "
                         f"value; allowed values: {', '.join(with_reference)}")
    return Reference(gaps, raw.equivalence_margin, raw.depth_margin.multiple, raw.depth_margin.of, claims)


def _statement(path, name: str, template: str, read: list[GapSpec], margin: float) -> str:
    """A claim's statement template with the fields params/reference.yaml names filled in: a, b, reference and
    reference_text of its first gap, margin, and reference_ratio (the first gap's reference over the second's)."""
    fields = {"margin": margin}
    if read:
        first = read[0]
        fields |= {"a": first.a, "b": first.b, "reference": first.reference, "reference_text": first.reference_text}
    if len(read) == 2 and read[0].reference is not None and read[1].reference:
        fields["reference_ratio"] = read[0].reference / read[1].reference
    try:
        return template.format(**fields)
    except (KeyError, ValueError, IndexError) as e:
        raise ParamError(f"{path}: claim {name!r}: its statement names a field it does not have ({e}); "
                         "fields: a, b, reference, reference_text, margin, reference_ratio") from None


def check_claims(path, raw, gaps: dict[str, GapSpec], margin: float) -> tuple[ClaimSpec, ...]:
    """The claims section, validated: known keys and kinds, unique names, every gap a claim reads present (the error
    names the claim and the gap), the right number of gaps for its kind, the parts of an all_of claim declared, a
    statement whose every field the claim has (filled in here, once)."""
    if not isinstance(raw, list) or not raw:
        raise ParamError(f"{path}: claims must be a non-empty list of claims")
    keys = {f.name for f in fields(ClaimSpec)}
    claims: list[ClaimSpec] = []
    for item in raw:
        if not isinstance(item, dict) or not {"name", "kind", "gaps", "statement"} <= set(item) <= keys:
            raise ParamError(f"{path}: a claim needs name, kind, gaps and statement, and may give if_supported, "
                             f"if_refuted, parts (got {item!r})")
        name, kind = item["name"], item["kind"]
        if kind not in CLAIM_KINDS:
            raise ParamError(f"{path}: claim {name!r}: kind={kind!r} is not allowed; allowed values: "
                             f"{', '.join(CLAIM_KINDS)}")
        for gap in item["gaps"]:
            if gap not in gaps:
                raise ParamError(f"{path}: claim {name!r} reads gap {gap!r}, which is missing from gaps "
                                 f"(declared: {', '.join(gaps)})")
        if len(item["gaps"]) != GAPS_PER_KIND[kind]:
            raise ParamError(f"{path}: claim {name!r}: a claim of kind {kind} reads {GAPS_PER_KIND[kind]} gaps "
                             f"(got {item['gaps']})")
        part_keys = {f.name for f in fields(ClaimPart)}
        raw_parts = item.get("parts") or []
        if not isinstance(raw_parts, list) or any(not isinstance(p, dict) or set(p) != part_keys for p in raw_parts):
            raise ParamError(f"{path}: claim {name!r}: parts must be a list of mappings with exactly the keys "
                             f"{', '.join(sorted(part_keys))} (got {raw_parts!r})")
        parts = tuple(ClaimPart(**p) for p in raw_parts)
        if (kind == "all_of") != bool(parts):
            raise ParamError(f"{path}: claim {name!r}: parts belong to an all_of claim, which needs them")
        statement = _statement(path, name, item["statement"], [gaps[g] for g in item["gaps"]], margin)
        claims.append(ClaimSpec(name, kind, tuple(item["gaps"]), statement, item.get("if_supported", ""),
                                item.get("if_refuted", ""), parts))
    names = [c.name for c in claims]
    for c in claims:
        if names.count(c.name) > 1:
            raise ParamError(f"{path}: claim {c.name!r} is declared twice")
        for part in c.parts:
            if part.claim not in names or part.claim == c.name:
                raise ParamError(f"{path}: claim {c.name!r}: part {part.claim!r} is not another declared claim")
    return tuple(claims)
