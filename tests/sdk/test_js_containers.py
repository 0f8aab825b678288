"""Containers made by the JS tracer (sdk/js) decode in Python and run on the interpreter like the Python-traced ones.

node runs sdk/js/scripts/dump-corpus.js, which traces tests/sdk/programs.py's programs as written in
sdk/js/test/programs.js. A missing node is a failure, not a skip: the SDK is part of the project.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.sdk.foreign import assert_mutations_rejected, assert_runs_like_python
from tests.sdk.make_corpus import ROOT
from tests.sdk.programs import PROGRAMS


@pytest.fixture(scope="module")
def js_made() -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed, so the JS SDK (sdk/js) cannot be tested. Fix: install Node.js 20+")
    out = subprocess.run([node, "sdk/js/scripts/dump-corpus.js"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {name: bytes.fromhex(h) for name, h in json.loads(out.stdout).items()}


def test_node_traces_every_corpus_program(js_made):
    assert sorted(js_made) == sorted(PROGRAMS)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_js_container_decodes_and_runs_like_the_python_trace(js_made, name):
    assert_runs_like_python(js_made[name], PROGRAMS[name](), seeds=(0, 1))


def test_mutations_of_js_made_containers_are_rejected(js_made):
    assert_mutations_rejected(js_made, seed=16)
