"""Adapters from the lab to engines built for scale: its environments and judges under TRL's `GRPOTrainer`
(`integrations.trl`)."""
