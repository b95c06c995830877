"""shell_words splits documented shell text into the commands bash would run, with their lines."""

from __future__ import annotations

from shell_words import SimpleCommand, simple_commands


def test_continuations_comments_chains_and_environment_prefixes():
    text = (
        "# set up\n"
        "git clone <this repo> retool && cd retool   # then\n"
        "MODEL_PATH=/m X='a b' ./run_x.sh \\\n"
        "    trainer.steps=130 2>&1 | tee log.txt; echo done &\n"
    )
    assert simple_commands(text) == [
        SimpleCommand(2, (), ("git", "clone", "<this repo>", "retool")),
        SimpleCommand(2, (), ("cd", "retool")),
        SimpleCommand(3, (("MODEL_PATH", "/m"), ("X", "a b")), ("./run_x.sh", "trainer.steps=130"), ((">&", "1"),)),
        SimpleCommand(4, (), ("tee", "log.txt")),
        SimpleCommand(4, (), ("echo", "done")),
    ]


def test_quotes_hashes_inside_words_redirections_and_here_documents():
    text = (
        'curl -d \'{"code": "print(1)  # not a comment"}\' url#frag > out.json\n'
        "cat <<EOF > f.txt\nretool-eval --not-a-command\nEOF\n"
        'echo "a \\"b\\" $(date +%s)" < in.txt\n'
    )
    assert simple_commands(text) == [
        SimpleCommand(1, (), ("curl", "-d", '{"code": "print(1)  # not a comment"}', "url#frag"), ((">", "out.json"),)),
        SimpleCommand(2, (), ("cat",), (("<<", "EOF"), (">", "f.txt"))),
        SimpleCommand(5, (), ("echo", 'a "b" $(date +%s)'), (("<", "in.txt"),)),
    ]


def test_redirections_are_kept_with_their_command():
    text = "mkdir -p runs && nohup retool-sandbox serve >> runs/sandbox.log 2>&1 &\nls &> all.txt\n"
    assert [(c.words, c.redirects) for c in simple_commands(text)] == [
        (("mkdir", "-p", "runs"), ()),
        (("nohup", "retool-sandbox", "serve"), ((">>", "runs/sandbox.log"), (">&", "1"))),
        (("ls",), (("&>", "all.txt"),)),
    ]


def test_comment_only_and_empty_text_has_no_commands():
    assert simple_commands("\n   # only a comment\n\n") == []
