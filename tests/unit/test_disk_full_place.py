"""A full disk names the filesystem that is full (issue 43, class 7): an error that names no file (safetensors,
torch.save, a library's temp file) used to be blamed on the output's or the working directory's filesystem, even
when that one had plenty free and the cache or /tmp had filled."""
from __future__ import annotations

import errno

from swiftbox import disk


def test_the_full_cache_is_named_not_the_roomy_output(tmp_path, monkeypatch):
    out, cache = tmp_path / "out", tmp_path / "cache"
    out.mkdir()
    cache.mkdir()
    monkeypatch.setenv("SWIFTBOX_CACHE", str(cache))
    monkeypatch.setattr(disk, "free_bytes", lambda path: 0 if str(path).startswith(str(cache)) else 50 << 30)
    error = RuntimeError("I/O error: No space left on device (os error 28)")        # safetensors: no file name
    assert disk.no_space(error)
    message = str(disk.full_disk_error(error, out))
    assert f"while writing {disk.shown(cache)}" in message and disk.shown(out) not in message, message


def test_the_named_file_wins_and_a_quota_falls_back_to_the_output(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "free_bytes", lambda path: 50 << 30)     # nothing looks full: a quota
    named = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x" / "weights.bin"))
    assert "while writing " + disk.shown(tmp_path / "x" / "weights.bin") in str(disk.full_disk_error(named, "/"))
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert "while writing " + disk.shown(tmp_path) in str(disk.full_disk_error(quota, tmp_path))


def test_mount_points_with_escaped_characters_are_matched(tmp_path, monkeypatch):
    mounts = tmp_path / "mounts"
    mounts.write_text("overlay / overlay rw 0 0\n/dev/sdb1 /mnt/my\\040disk ext4 rw 0 0\n"
                      "/dev/sdc1 /mnt/back\\134slash ext4 rw 0 0\n")
    real_open = open

    def fake_open(path, *args, **kwargs):
        return real_open(mounts if path == "/proc/mounts" else path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    assert disk.filesystem("/mnt/my disk/models/a.bin") == ("/dev/sdb1", "/mnt/my disk")
    assert disk.filesystem("/mnt/back\\slash/x") == ("/dev/sdc1", "/mnt/back\\slash")
    assert disk.filesystem("/mnt/my\\040disk/x") == ("overlay", "/")
