"""kqactors.records"""
