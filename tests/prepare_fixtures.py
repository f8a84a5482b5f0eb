"""The module-scoped fixtures the prepare tests share, loaded as a pytest plugin where needed with
`pytest_plugins = ("prepare_fixtures",)` (a plugin, not an import: the test functions take them as arguments).

- `layouts`: mail_samples.corpus_messages() in every layout, keyed by kind (mbox, maildir, tree, enron, csv,
  message);
- `hostile_tree`: hostile_mail's kinds and 150 randomly damaged messages in one folder tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_mail import write_hostile_tree
from mail_samples import corpus_messages, write_layouts


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_layouts(tmp_path_factory.mktemp("mail"), corpus_messages())


@pytest.fixture(scope="module")
def hostile_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_hostile_tree(tmp_path_factory.mktemp("hostile"))
