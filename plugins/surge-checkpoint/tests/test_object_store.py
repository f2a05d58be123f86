"""Checkpoints on an object store: an S3-compatible server (moto) on loopback, reached through s3fs."""

from __future__ import annotations

import uuid

import fsspec
import pytest
from loguru import logger
from surge import checkpoint as store
from surge.testing import TinyDataModule
from surge_checkpoint import ModelCheckpoint

s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3_endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint, monkeypatch):
    """A fresh bucket; every ``s3://`` URL in the test reaches the loopback server."""
    for name in ("AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setitem(fsspec.config.conf, "s3", {"client_kwargs": {"endpoint_url": s3_endpoint}})
    s3fs.S3FileSystem.clear_instance_cache()
    name = f"surge-{uuid.uuid4().hex[:12]}"
    fs = fsspec.filesystem("s3")
    fs.mkdir(name)
    yield name
    s3fs.S3FileSystem.clear_instance_cache()


def _listing(url: str) -> list[str]:
    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    return sorted(p.rsplit("/", 1)[1] for p in fs.ls(path, detail=False))


def test_round_trip_through_s3(fit, scored, bucket):
    url = f"s3://{bucket}/run"
    callback = ModelCheckpoint(dirpath=url, monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    fit([callback], model=scored([5, 3, 4, 1]), max_epochs=4)
    committed = ["epoch=1.ckpt", "epoch=3.ckpt", "last.ckpt"]
    assert _listing(url) == sorted([*committed, *(f"{n}.sha256" for n in committed)])  # evicted: data and marker
    assert callback.best_model_path == f"{url}/epoch=3.ckpt"
    assert callback.surge_checkpoint_path("last") == f"{url}/last.ckpt"

    again = ModelCheckpoint(dirpath=url, monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    trainer = fit([again], model=scored([5, 3, 4, 1, 0]), max_epochs=5, ckpt_path="last")
    assert trainer.global_step == 20 and again.best_model_path == f"{url}/epoch=4.ckpt"
    assert _listing(url)[:4] == ["epoch=3.ckpt", "epoch=3.ckpt.sha256", "epoch=4.ckpt", "epoch=4.ckpt.sha256"]
    assert trainer.validate(datamodule=TinyDataModule(), ckpt_path="best")
    assert store.load(f"{url}/epoch=4.ckpt")["global_step"] == 20


def test_asynchronous_saves_to_s3(fit, bucket):
    url = f"s3://{bucket}/async"
    fit([ModelCheckpoint(dirpath=url, every_n_train_steps=2, save_top_k=-1, async_save=True)], max_epochs=2)
    names = [n for n in _listing(url) if n.endswith(".ckpt")]
    assert names == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt", "epoch=1-step=8.ckpt"]
    for name in names:
        store.verify(f"{url}/{name}")


@pytest.fixture
def failing_marker(monkeypatch):
    """Make the upload of a commit marker whose name ends with ``armed[0]`` fail, as if the process died
    between uploading a checkpoint's data and its marker."""
    armed: list[str] = []
    original = s3fs.S3FileSystem._pipe_file

    async def pipe_file(self, path, data, *args, **kwargs):
        if armed and path.endswith(armed[0]):
            raise ConnectionError(f"connection lost while uploading {path}")
        return await original(self, path, data, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_pipe_file", pipe_file)
    s3fs.S3FileSystem.clear_instance_cache()  # instances bind their sync methods when built
    return armed


@pytest.mark.parametrize(
    ("cut", "resumes_at"),
    [
        ("epoch=1-step=8.ckpt.sha256", 4),  # the new top-k file never committed: "last" is the old last.ckpt
        ("last.ckpt.sha256", 8),  # last.ckpt overwritten but not committed: the committed top-k file of step 8
    ],
)
def test_a_crash_mid_upload_never_makes_last_point_to_an_uncommitted_checkpoint(
    fit, bucket, failing_marker, cut, resumes_at
):
    url = f"s3://{bucket}/crash"
    messages: list[str] = []

    def settings():
        return ModelCheckpoint(dirpath=url, save_top_k=-1, save_last=True)

    fit([settings()], max_epochs=1)
    before = settings().surge_checkpoint_path("last")
    assert before == f"{url}/last.ckpt" and store.load(before)["global_step"] == 4

    failing_marker.append(cut)
    with pytest.raises(
        store.CheckpointSaveError, match=f"{cut.removesuffix('.sha256')}: ConnectionError: connection lost"
    ):
        fit([settings()], max_epochs=2, ckpt_path="last")
    failing_marker.clear()
    fsspec.filesystem("s3").invalidate_cache()

    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        resolved = settings().surge_checkpoint_path("last")
    finally:
        logger.remove(sink)
    assert store.load(resolved)["global_step"] == resumes_at
    assert resolved == (before if resumes_at == 4 else f"{url}/epoch=1-step=8.ckpt")
    damaged = cut.removesuffix(".sha256")
    assert f"{url}/{damaged}" in "".join(messages)  # it says which newer checkpoint it skipped, and why

    trainer = fit([settings()], max_epochs=2, ckpt_path="last")  # and the run goes on from there
    assert trainer.global_step == 8
