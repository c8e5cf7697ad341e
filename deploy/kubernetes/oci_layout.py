"""The OCI image layout as a tarball (what `ctr images import` takes),
shared by oci-image.py (images of files) and spin-oci.py (Spin apps as
layers): blobs by digest, one manifest, an index naming the image."""
import hashlib
import io
import json
import tarfile


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_image(out_path: str, name: str, config: bytes,
                layers: list[tuple[str, bytes]], platform: dict | None = None) -> None:
    """Writes the image `name`: its config, its `layers` as (media type,
    bytes) in order, and, if given, the platform its index entry names
    (left out, containerd filters nothing out, as for a manifest a
    registry serves on its own)."""
    with tarfile.open(out_path, "w") as out:
        def blob(data: bytes) -> str:
            digest = digest_of(data)
            info = tarfile.TarInfo("blobs/sha256/" + digest.split(":", 1)[1])
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
            return digest

        descriptors = [{"mediaType": media_type, "digest": blob(data), "size": len(data)}
                       for media_type, data in layers]
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": blob(config), "size": len(config)},
            "layers": descriptors,
        }, sort_keys=True).encode()
        entry = {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": blob(manifest),
            "size": len(manifest),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name,
            },
        }
        if platform:
            entry["platform"] = platform
        index = json.dumps({"schemaVersion": 2, "manifests": [entry]}).encode()
        for file_name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                                ("index.json", index)):
            info = tarfile.TarInfo(file_name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
