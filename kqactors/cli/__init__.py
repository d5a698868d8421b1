"""kqactors.cli"""
