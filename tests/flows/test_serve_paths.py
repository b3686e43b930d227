"""A client never reads the server's filesystem in an error (issue 32, class 5): a chat template that rejects a
conversation used to answer `the chat template of /home/.../models/x rejected ...`, the server's absolute path.
Now server paths in client-facing errors become the served model name (the model's own directory) or a bare
file name (any other absolute path). Runtime adapter errors are the adapter loader's, checked with it."""
from __future__ import annotations

import shutil

import openai
import pytest

from swiftbox.catalog.toy import toy_path
from tests.support.serve_fixtures import KEY, start_server

GEMMA = "tests/fixtures/templates/google-gemma-2-2b-it.jinja"   # raises on a system turn


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    model = tmp_path_factory.mktemp("deep") / "srv" / "private" / "models" / "strict"
    shutil.copytree(toy_path(0), model)
    shutil.copy(GEMMA, model / "chat_template.jinja")
    server, names, stop = start_server(str(model), work_dir=model.parent)
    yield server, names, model
    stop()


def test_a_template_refusal_names_the_served_model_not_its_path(strict_server):
    server, names, model = strict_server
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=names.base, messages=[{"role": "system", "content": "be brief"},
                                                                   {"role": "user", "content": "hi"}], max_tokens=2)
    text = str(err.value.body)
    assert "rejected a conversation" in text, text
    assert str(model.parent) not in text and "/srv/private" not in text, text
    assert names.base in text


def test_server_paths_become_public_names():
    from swiftbox.serving.errors import public_text

    known = {"/srv/private/models/strict": "strict"}
    assert public_text("template of /srv/private/models/strict rejected it", known) == "template of strict rejected it"
    assert public_text("No such file: '/etc/swiftbox/secret/key.txt'", known) == "No such file: 'key.txt'"
    plain = "see https://x.org/a/b and 3/4 and ./rel/p"
    assert public_text(plain, known) == plain
