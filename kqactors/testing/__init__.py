"""kqactors.testing"""
