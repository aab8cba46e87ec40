"""The CDK for Terraform app platform engineers deploy (`npx cdktf deploy`).

The stacks (project services, bucket, service accounts, Artifact Registry, trainer image,
Vertex AI TensorBoard, GitOps identity) are being built; until then this synthesises an
empty app so that `cdktf synth` works from a fresh checkout.
"""

from cdktf import App


def main() -> None:
    App().synth()


if __name__ == "__main__":
    main()
