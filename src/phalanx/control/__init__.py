"""The control loop: owns the engine and every store write, drives the runtime."""
