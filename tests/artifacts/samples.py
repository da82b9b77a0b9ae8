"""Sample documents shared by the artifact tests and the bench: Chinese and English, light and dense."""

from __future__ import annotations

ZH = (
    """# 城市更新中的社区参与
_2024 年度研究报告_

## 背景
城市更新已经从大规模拆建转向小规模、渐进式的有机更新，社区居民的参与成为项目成败的关键。

## 主要发现
- 居民参与度与项目满意度显著正相关
- 早期介入比后期补救更有效
- 数字化工具降低了参与门槛
- 老年群体仍需线下渠道
- 透明的信息公开建立信任
- 基层组织发挥桥梁作用
- 资金机制需要多元化
- 评估体系有待完善

## 案例分析
- 上海杨浦滨江
- 北京大栅栏

杨浦滨江的更新通过“规划师进社区”机制，让居民在方案阶段就提出意见，累计收集建议两千余条，其中三成被采纳。\
大栅栏则采用“微更新”模式，以院落为单位逐步改造，避免了大规模搬迁带来的社会网络断裂。两者共同的经验是：\
把居民当作合作者，而非被动的接受者。

> 备注：这一页讲两个案例，控制在两分钟内。

## 详细指标
"""
    + "\n".join(
        f"- 第{i}项指标：社区参与的深度与广度在不同城市之间存在明显差异，"
        f"需要结合当地的治理结构、人口结构与财政能力综合分析（2023 年 GDP 数据、OECD 报告），不能简单照搬。"
        for i in range(1, 13)
    )
    + """

## 来源
- [住房和城乡建设部：城市更新行动](https://www.mohurd.gov.cn/xinwen/gzdt/202107/20210709_250802.html)
- [Urban Regeneration and Community Participation](https://doi.org/10.1080/07352166.2020.1234567)
"""
)

EN = (
    """# Community Participation in Urban Renewal
_Annual research report 2024_

## Background
Urban renewal has moved from large-scale demolition to small, incremental regeneration, and residents' \
participation has become a decisive factor in whether projects succeed.

## Key findings
- Participation correlates with satisfaction
- Early involvement beats late repair
- Digital tools lower the barrier
- Older residents need offline channels
- Transparency builds trust
- Grassroots groups act as bridges
- Funding must diversify
- Evaluation is still immature

## Case studies
- Yangpu riverside, Shanghai
- Dashilar, Beijing

Yangpu's renewal brought planners into the neighbourhood so residents could comment while plans were still \
drafts; more than two thousand suggestions were collected and about a third adopted. Dashilar used a \
micro-renewal model, courtyard by courtyard, which avoided the break-up of social networks that mass \
relocation causes.

> Notes: two cases, two minutes.

## Detailed indicators
"""
    + "\n".join(
        f"- Indicator {i}: the depth and breadth of community participation differ markedly between cities "
        "and must be read with local governance, demographics and fiscal capacity "
        "rather than copied wholesale; "
        "see Supercalifragilisticexpialidocious-antidisestablishmentarianism-appendix."
        for i in range(1, 11)
    )
    + """

## Sources
- [Urban Regeneration and Community Participation](https://doi.org/10.1080/07352166.2020.1234567)
- https://example.org/a/very/long/path/that/keeps/going/without/any/spaces/so/it/must/break/between/characters
"""
)
