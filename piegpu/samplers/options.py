"""SamplingOptions: every sampling choice of one request, checked once, turned into a Sampler or a row's RowParams.

generate(), generate_batch(), n samples, the CLI and the server build one SamplingOptions from
what the user or the request said (a sampler name, a Sampler, or a sampler program; the
temperature; the named sampler's parameter; keyword options such as top_p= or
repetition_penalty=), and take from it both the Sampler that one sequence traces and the
RowParams that a batched row carries as data. A parameter that does not belong to the
chosen sampler is an error naming it, never silently taken for another.
"""

from __future__ import annotations

from ..errors import ValidationError
from .program import ProgramSampler, is_sampler_program
from .rows import RowParams
from .spec import NAMES, OPTIONS, TRUNCATIONS, from_spec

# the short parameter names of the named samplers: which samplers each belongs to
ALIASES = {"k": ("top-k",), "p": ("top-p", "min-p", "typical"), "a": ("top-a",)}


class SamplingOptions:
    """See the module docstring. Build with SamplingOptions.of(sampler, temperature, **options)."""

    def __init__(self, spec, temperature: float = 1.0, value=None, options: dict | None = None):
        self.spec = spec
        self.temperature = temperature
        self.value = value
        self.options = {k: v for k, v in (options or {}).items() if v is not None}
        self.is_program = is_sampler_program(spec)
        # Checked at once: a bad value fails here, before any device work.
        self.sampler = None if self.is_program else from_spec(spec, temperature, value, **self.options)

    @classmethod
    def of(cls, sampler="greedy", temperature: float = 1.0, *, where: str = "generate", also=(),
           **kwargs) -> "SamplingOptions":
        """Options of a generate()-style call: `sampler` (a name, Sampler, SamplingOptions or program) and its options.

        `also`: other keyword names the caller accepts (for the message naming the valid ones).
        """
        if isinstance(sampler, SamplingOptions):
            if kwargs or temperature != 1.0:
                raise ValidationError(f"{where}: sampler is a SamplingOptions, which holds every sampling choice; "
                                      f"got also {sorted(kwargs) or ['temperature']}. Fix: put them in the options")
            return sampler
        unknown = sorted(set(kwargs) - set(OPTIONS) - {"value", *ALIASES})
        if unknown:
            raise ValidationError(f"{where}: unknown arguments {unknown}. Fix: sampler options are "
                                  f"{['value', *ALIASES, *also, *OPTIONS]}")
        value = kwargs.pop("value", None)
        name = sampler.replace("_", "-") if isinstance(sampler, str) else None
        for alias, owners in ALIASES.items():
            if kwargs.get(alias) is None:
                kwargs.pop(alias, None)
                continue
            given = kwargs.pop(alias)
            if name not in owners:
                what = f"sampler {sampler!r}" if name is not None else "this sampler"
                mine = next((a for a, o in ALIASES.items() if name in o), None)
                fix = ([f"{mine}= (or value=) sets {name}'s parameter"] if mine else
                       [f"value= sets {name}'s parameter"] if name in TRUNCATIONS else [])
                fix.append(f"{_option_of(owners[0])}={given!r} adds a {owners[0]} stage")
                raise ValidationError(f"{where}: {alias}={given!r} is the parameter of {' / '.join(owners)}, not of "
                                      f"{what}. Fix: {'; '.join(fix)}")
            if value is not None and value != given:
                raise ValidationError(f"{where}: the sampler's parameter was given twice: value={value!r} and "
                                      f"{alias}={given!r}. Fix: pass one of them")
            value = given
        if value is not None and isinstance(sampler, str) and name not in TRUNCATIONS and name in NAMES:
            raise ValidationError(f"{where}: sampler {sampler!r} takes no parameter, got value={value!r}. Fix: drop "
                                  f"it, or name a sampler with one ({list(TRUNCATIONS)})")
        return cls(sampler, temperature, value, kwargs)

    def for_sequence(self, tokenizer, vocab: int, watermark=None):
        """The Sampler (or ProgramSampler) one sequence traces into its decode epilogue.

        A program is the whole sampler: ProgramSampler refuses a temperature, parameter, option or
        watermark beside it. A named sampler's watermark is the caller's to add (it is an inferlet).
        """
        if self.is_program:
            return ProgramSampler(self.spec, vocab, self.temperature, self.value, self.options, watermark)
        return self.sampler.for_tokenizer(tokenizer)

    def row_params(self, seed: int = 0, logprobs: bool = False, top_logprobs: int = 0,
                   constrained: bool = False, tokenizer=None) -> RowParams:
        """The RowParams of a batched row with these options (`tokenizer` resolves DRY's string breakers).

        A sampler program is the row's whole sampler: it draws the row's token from the row's logits
        and its RNG state [seed, tokens drawn] (as generate(sampler=prog) does alone).
        """
        if self.is_program:
            from .program import as_sampler_program
            if self.temperature != 1.0 or self.value is not None or self.options:
                raise ValidationError("a sampler program is the whole sampler: temperature, parameters and options "
                                      "do not apply. Fix: trace them into the program and drop them")
            return RowParams(seed=seed, logprobs=logprobs, top_logprobs=top_logprobs, constrained=constrained,
                             program=as_sampler_program(self.spec, "sampler program"))
        return RowParams.of(self.sampler, seed, logprobs, top_logprobs, constrained, tokenizer)

    def __repr__(self) -> str:
        return f"SamplingOptions({self.spec!r}, temperature={self.temperature}, value={self.value}, {self.options})"


def _option_of(name: str) -> str:
    """The keyword option that adds stage `name` (top-p -> top_p)."""
    from .spec import OPTION_ORDER
    return next((key for key, n in OPTION_ORDER if n == name), name.replace("-", "_"))


__all__ = ["SamplingOptions", "ALIASES"]
