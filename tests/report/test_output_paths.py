"""Where the commands write: ``-o`` through a file is refused naming it, ``-o DIR/``
writes into a folder, and an empty path is refused rather than ignored."""
import pytest

from ipusim import cli
from ipusim.report import write_autoreport


@pytest.fixture(scope="module")
def report(tmp_path_factory, replicated_timeline):
    return write_autoreport(tmp_path_factory.mktemp("paths") / "inference", replicated_timeline)


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code not in (0, None)
    return capsys.readouterr().err


def test_compare_into_a_path_through_a_file_names_the_file(report, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    err = refused(["compare", str(report), str(report), "-o", str(afile / "x.html")], capsys)
    assert f"--output {afile / 'x.html'}: {afile} is a file, not a folder" in err
    assert "File exists" not in err


def test_compare_into_a_new_folder_named_with_a_slash_writes_into_it(report, tmp_path, capsys):
    assert cli.main(["compare", str(report), str(report), "-o", f"{tmp_path / 'newdir'}/"]) == 0
    assert (tmp_path / "newdir" / "compare.html").is_file()
    assert f"Page: {tmp_path / 'newdir' / 'compare.html'}" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["trace", "{report}", "--hta", ""],
                                  ["compare", "{report}", "{report}", "-o", ""],
                                  ["report", "{report}", "-o", ""]])
def test_an_empty_path_is_refused_naming_the_option(report, capsys, argv):
    argv = [word.format(report=report) for word in argv]
    err = refused(argv, capsys)
    assert "expected a path, got an empty string" in err and argv[-2] in err
