"""The ``trn`` PyTorch device (PrivateUse1). Registration lands with the device issue."""


def _autoload() -> None:
    """Entry point of ``torch.backends``: called while torch is importing; must stay cheap and safe."""
    return None
