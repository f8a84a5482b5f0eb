"""The data pipeline: mail sources -> Email records -> split corpus -> tokenizer -> token store."""
