"""Network architectures (UNet, CLIP, T5, VAE, MMDiT, Flux) built from ``core.ops`` layers."""
