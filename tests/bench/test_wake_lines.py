"""The wake benchmarks' line parsers (bench/wake_lines.py): what a watch line names and carries."""

from bench.wake_lines import dlb_line, dlb_nonce, line_shape, ours_line

DLB = '2026-11-30T21:30:14Z codex: "bench payload 17"\n'


def test_ours_new_line_names_its_ids():
    assert ours_line("2 new for claude: #41 from kimi (task), #42 from codex (notice) — call receive_messages\n") == (
        "new",
        [41, 42],
    )


def test_ours_unread_line_of_a_rearmed_watch():
    assert ours_line("1 unread for claude: #7 from kimi (task) — call receive_messages") == ("unread", [7])


def test_ours_expiry_line_names_nothing():
    line = "inbox watch for claude ended after 1740 s (its --max-seconds); nothing is lost, re-arm: #3 from x"
    assert ours_line(line) == ("other", [])


def test_dlb_line_fields():
    assert dlb_line(DLB) == ("2026-11-30T21:30:14Z", "codex", "bench payload 17")


def test_dlb_line_rejects_other_text():
    assert dlb_line("dlb-monitor: watching 'claude'") is None
    assert dlb_line('2026-11-30 codex: "x"') is None


def test_dlb_nonce_needs_the_whole_benchmark_body():
    assert dlb_nonce(DLB, "bench payload") == "17"
    assert dlb_nonce(DLB, "other payload") is None
    assert dlb_nonce('2026-11-30T21:30:14Z codex: "bench payload 1…"', "bench payload") is None  # truncated snippet
    assert dlb_nonce('2026-11-30T21:30:14Z codex: "bench payload "', "bench payload") is None
    assert dlb_nonce("not a line", "bench payload") is None


def test_dlb_sender_with_colon_and_quotes_in_the_snippet():
    assert dlb_line('2026-11-30T21:30:14Z a: b: "say "hi" 3"') == ("2026-11-30T21:30:14Z", "a: b", 'say "hi" 3')


def test_line_shape_hides_text_and_digits():
    assert line_shape(DLB, "bench payload 17") == '9999-99-99T99:99:99Z codex: "<text>"'
    ours = "1 new for claude: #41 from kimi (task) — call receive_messages\n"
    assert line_shape(ours, "bench payload") == "9 new for claude: #99 from kimi (task) — call receive_messages"
