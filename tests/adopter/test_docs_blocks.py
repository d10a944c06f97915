"""The docs' marked blocks, which the adopter tests write into a project:
each has a place there and is code as written (no placeholders); the README
shows some of them again, unchanged."""

from .project import (
    BLOCKS,
    INSTALL_BLOCK,
    TESTING_INSTALL_BLOCK,
    documented_blocks,
    documented_extras,
    readme_blocks,
)


def test_every_marked_block_has_a_place_in_the_project():
    blocks = documented_blocks()
    assert set(blocks) == {INSTALL_BLOCK, TESTING_INSTALL_BLOCK, *BLOCKS}
    for name, (path, _how) in BLOCKS.items():
        # Its first line tells the reader the file the test writes it into.
        first_line = blocks[name].splitlines()[0]
        assert first_line.startswith(f"# {path}"), name


def test_the_marked_python_blocks_compile_and_hold_no_placeholder():
    blocks = documented_blocks()
    for name, (path, _how) in BLOCKS.items():
        if path.endswith(".py"):
            compile(blocks[name], f"docs block {name!r}", "exec")
        # `...` compiles, but as a placeholder it would not run as written.
        assert "..." not in blocks[name], name


def test_the_readme_shows_the_documented_blocks_as_they_are():
    # The README's quickstarts are the docs' blocks, so the tests run them too.
    shown = readme_blocks()
    assert shown, "the README marks no block"
    documented = documented_blocks()
    for name, code in shown.items():
        assert name in documented, f"the README's block {name!r} is in no docs page"
        assert code == documented[name], f"the README's {name!r} block differs"


def test_the_install_block_names_the_database_and_broker_extras():
    assert documented_extras() == "postgres,redis"


def test_the_proof_kit_is_installed_with_the_testing_extra():
    assert documented_extras(TESTING_INSTALL_BLOCK) == "testing"
