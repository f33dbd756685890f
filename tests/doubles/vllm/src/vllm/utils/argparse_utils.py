"""TEST DOUBLE of `vllm.utils.argparse_utils`: vLLM's FlexibleArgumentParser is an argparse.ArgumentParser."""

from argparse import ArgumentParser as FlexibleArgumentParser

__all__ = ["FlexibleArgumentParser"]
