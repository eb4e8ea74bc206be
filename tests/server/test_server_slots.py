"""llama.cpp's slot save/restore (POST /slots/{id}?action=save|restore|erase with
--slot-save-path DIR): a slot saved after a completion, erased or overwritten, and restored
answers the same request with the same text, reusing the restored prompt; filenames that could
leave DIR, bad ids, actions and files are 400; without --slot-save-path every action is 501."""
import json
import os

PROMPT = "And God said, Let there be light: and there was light. And God saw the light"
REQUEST = {"prompt": PROMPT, "n_predict": 12, "seed": 5, "temperature": 0.8,
           "repeat_penalty": 1.2}


def slots(s):
    status, text = s.get("/slots")
    assert status == 200
    return json.loads(text)


def test_disabled_without_slot_save_path(start_server):
    s = start_server("-np", 1, "-c", 256)
    for action in ("save", "restore", "erase"):
        status, body = s.post(f"/slots/0?action={action}", {"filename": "x.bin"})
        assert status == 501, body
        assert body["error"]["type"] == "not_supported_error"
        assert "--slot-save-path" in body["error"]["message"]


def test_save_erase_restore_gives_the_same_text(start_server, tmp_path):
    s = start_server("-np", 1, "-c", 256, "--slot-save-path", tmp_path)
    status, first = s.post("/completion", REQUEST)
    assert status == 200, first
    n_slot = slots(s)[0]["n_cached"]
    assert n_slot > first["tokens_evaluated"]

    status, saved = s.post("/slots/0?action=save", {"filename": "slot0.bin"})
    assert status == 200, saved
    assert saved["id_slot"] == 0 and saved["filename"] == "slot0.bin"
    assert saved["n_saved"] == n_slot
    assert saved["n_written"] == os.path.getsize(tmp_path / "slot0.bin")
    assert saved["timings"]["save_ms"] >= 0

    status, erased = s.post("/slots/0?action=erase")
    assert status == 200 and erased == {"id_slot": 0, "n_erased": n_slot}
    assert slots(s)[0]["n_cached"] == 0

    # Another prompt takes the slot, then the restore brings the saved one back.
    status, other = s.post("/completion", {"prompt": "Jesus wept", "n_predict": 4, "seed": 1})
    assert status == 200, other
    status, restored = s.post("/slots/0?action=restore", {"filename": "slot0.bin"})
    assert status == 200, restored
    assert restored["id_slot"] == 0 and restored["filename"] == "slot0.bin"
    assert restored["n_restored"] == n_slot
    assert restored["n_read"] == saved["n_written"]
    assert restored["timings"]["restore_ms"] >= 0
    assert slots(s)[0]["n_cached"] == n_slot

    status, again = s.post("/completion", REQUEST)
    assert status == 200, again
    assert again["content"] == first["content"]
    # The restored prompt is reused: only its last token is evaluated again.
    assert again["tokens_cached"] == first["tokens_evaluated"] - 1

    status, cold = s.post("/completion", {**REQUEST, "cache_prompt": False})
    assert status == 200 and cold["tokens_cached"] == 0
    assert cold["content"] == first["content"]


def test_bad_requests_are_400_and_leave_the_server_working(start_server, tmp_path):
    s = start_server("-np", 2, "-c", 256, "--slot-save-path", tmp_path / "slots")
    status, first = s.post("/completion", REQUEST)
    assert status == 200, first
    for name in ("../x.bin", "a/b.bin", "..", ".", "", "a\\b", "x..y"):
        status, body = s.post("/slots/0?action=save", {"filename": name})
        assert status == 400, (name, body)
        assert body["error"]["message"] == "Invalid filename"
    assert not os.path.exists(tmp_path / "x.bin")
    assert s.post("/slots/0?action=save", {})[0] == 400
    assert s.post("/slots/0?action=save", {"filename": 7})[0] == 400
    assert s.request("POST", "/slots/0?action=save", raw=b"not json")[0] == 400
    assert s.post("/slots/0?action=fly", {"filename": "a.bin"})[0] == 400
    assert s.post("/slots/0", {"filename": "a.bin"})[0] == 400
    status, body = s.post("/slots/9?action=save", {"filename": "a.bin"})
    assert status == 400 and "invalid slot id 9" in body["error"]["message"]
    assert s.post("/slots/x?action=save", {"filename": "a.bin"})[0] == 400
    # Nothing to save in the slot the first request did not use.
    busy = [x for x in slots(s) if x["n_cached"] == 0][0]["id"]
    status, body = s.post(f"/slots/{busy}?action=save", {"filename": "a.bin"})
    assert status == 400 and "no tokens" in body["error"]["message"]
    # Restoring a missing file or one that is not a state file.
    status, body = s.post("/slots/0?action=restore", {"filename": "missing.bin"})
    assert status == 400 and "missing.bin" in body["error"]["message"]
    (tmp_path / "slots" / "garbage.bin").write_bytes(b"\x00" * 1000)
    status, body = s.post("/slots/0?action=restore", {"filename": "garbage.bin"})
    assert status == 400 and "garbage.bin" in body["error"]["message"], body
    assert "magic" in body["error"]["message"]
    status, again = s.post("/completion", REQUEST)
    assert status == 200 and again["content"] == first["content"]
