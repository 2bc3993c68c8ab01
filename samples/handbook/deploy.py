"""Deploy a service to staging, then to production after the smoke tests pass."""

import subprocess


def deploy(service: str, environment: str = "staging") -> None:
    """Build the image and roll it out; production needs a green staging deploy first."""
    subprocess.run(["make", "image", f"SERVICE={service}"], check=True)
    subprocess.run(["kubectl", "rollout", "restart", f"deployment/{service}", "-n", environment], check=True)
