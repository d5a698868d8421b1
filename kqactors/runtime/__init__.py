"""kqactors.runtime"""
